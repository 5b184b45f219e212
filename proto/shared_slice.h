// SharedBytes: a gRPC buffer that shows bytes owned elsewhere, without a
// copy. The slice holds a reference on their owner for as long as gRPC
// holds the slice (which may outlive the write's completion). gnmrd's
// session streams write the job's one serialization of a decision this way
// (daemon/job/wire_message.h), its node streams a round's shared bytes, and
// gnmr-relay the node's one copy of each delivery.
#pragma once

#include <memory>
#include <string>
#include <utility>

#include <grpcpp/grpcpp.h>

namespace gnmr {

// `bytes` must belong to `owner` and stay unchanged while it lives.
template <typename Owner>
grpc::ByteBuffer SharedBytes(const std::string& bytes, std::shared_ptr<Owner> owner) {
  using Holder = std::shared_ptr<Owner>;
  grpc::Slice slice(
      const_cast<char*>(bytes.data()), bytes.size(),  // gRPC only reads it
      [](void* holder) { delete static_cast<Holder*>(holder); }, new Holder(std::move(owner)));
  return grpc::ByteBuffer(&slice, 1);
}

}  // namespace gnmr
