#include "daemon/server/lane_reader.h"

#include <cstdint>
#include <string>

#include <google/protobuf/wire_format_lite.h>

#include "daemon/server/raw_unary.h"

namespace gnmr {

using google::protobuf::internal::WireFormatLite;

LaneReader::LaneReader(const grpc::ByteBuffer& in)
    : bytes_(in), reader_(&bytes_), input_(&reader_) {
  if (!in.Valid()) {
    status_ = Cancelled("no message arrived: the call ended first");
  } else if (!reader_.status().ok()) {
    status_ = Internal("cannot read the message bytes");
  }
}

bool LaneReader::Next(v1::LaneUp* up) {
  if (!status_.ok()) return false;
  const auto bad = [&](const std::string& why) {
    status_ = InvalidArgument("request does not parse as gnmr.v1.NodeClientMessage: " + why +
                              " after " + std::to_string(lanes_read_) + " lanes");
    return false;
  };
  for (;;) {
    const uint32_t tag = input_.ReadTag();
    if (tag == 0) return input_.ConsumedEntireMessage() ? false : bad("a bad field tag");
    if (tag != WireFormatLite::MakeTag(v1::NodeClientMessage::kLanesFieldNumber,
                                       WireFormatLite::WIRETYPE_LENGTH_DELIMITED)) {
      // A field this gnmrd does not know: skipped, as a whole parse would.
      if (!WireFormatLite::SkipField(&input_, tag)) return bad("a field that ends early");
      continue;
    }
    uint32_t length = 0;
    if (!input_.ReadVarint32(&length) || length > static_cast<uint32_t>(INT32_MAX)) {
      return bad("a lane's length that does not parse");
    }
    const auto limit = input_.PushLimit(static_cast<int>(length));
    up->Clear();
    Status s = ParseRequestField(&input_, up);
    input_.PopLimit(limit);
    if (!s.ok()) {
      status_ = InvalidArgument(s.message() + " (lane " + std::to_string(lanes_read_) +
                                " of a NodeClientMessage)");
      return false;
    }
    ++lanes_read_;
    return true;
  }
}

}  // namespace gnmr
