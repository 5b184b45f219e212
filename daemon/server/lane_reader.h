// LaneReader: the LaneUps of a NodeClientMessage (proto/gnmr/v1/relay.proto),
// read one at a time from the bytes gRPC received, so that gnmrd never
// holds such a message parsed whole.
//
// Why: a LaneUp parses to ~70 bytes (a 48-byte object, its allocation and
// its pointer in the message) besides its fields' bytes, and can be 2 bytes
// on the wire: a 12 MiB message of such lanes, parsed whole, holds ~0.4 GB,
// and a peer needs no token to send it (only a lane's hello is
// authenticated): docs/limits.md, "Peers that show no token". Read one at
// a time, a message costs its received bytes and its largest lane.
//
// The bytes are the same: a NodeClientMessage that parses as a whole reads
// here as the same LaneUps; one that does not stops at the LaneUp that does
// not parse, with status() saying so (the lanes before it were read).
#pragma once

#include <google/protobuf/io/coded_stream.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/support/proto_buffer_reader.h>

#include "gnmr/status.h"
#include "gnmr/v1/relay.pb.h"

namespace gnmr {

class LaneReader {
 public:
  // `in` must outlive the reader (its slices are read, not copied).
  explicit LaneReader(const grpc::ByteBuffer& in);
  LaneReader(const LaneReader&) = delete;
  LaneReader& operator=(const LaneReader&) = delete;

  // The next LaneUp into `up`: true; false at the end of the message or
  // when it does not parse (then status() says why).
  bool Next(v1::LaneUp* up);
  const Status& status() const { return status_; }

 private:
  grpc::ByteBuffer bytes_;  // shares the received slices
  grpc::ProtoBufferReader reader_;
  google::protobuf::io::CodedInputStream input_;
  Status status_;
  int lanes_read_ = 0;
};

}  // namespace gnmr
