#include "daemon/server/raw_unary.h"

#include <mutex>

#include <google/protobuf/stubs/logging.h>
#include <grpcpp/support/proto_buffer_reader.h>

namespace gnmr {
namespace {

// protobuf reports the field of a string that is not UTF-8 only in a log
// line. While a request is parsed, this thread's lines are captured instead
// of printed; everyone else's go to the handler that was there before.
thread_local std::string* captured = nullptr;
google::protobuf::LogHandler* previous_handler = nullptr;

void CapturingLogHandler(google::protobuf::LogLevel level, const char* file, int line,
                         const std::string& message) {
  if (captured != nullptr) {
    *captured = message;
    return;
  }
  if (previous_handler != nullptr) previous_handler(level, file, line, message);
}

void InstallLogHandler() {
  static std::once_flag once;
  std::call_once(once,
                 [] { previous_handler = google::protobuf::SetLogHandler(&CapturingLogHandler); });
}

// "String field 'gnmr.v1.RegisterRequest.job_id' contains invalid UTF-8
// data when parsing ..." -> "gnmr.v1.RegisterRequest.job_id".
std::string Utf8Field(const std::string& log_line) {
  const std::string lead = "String field '";
  const size_t begin = log_line.find(lead);
  if (begin == std::string::npos || log_line.find("UTF-8") == std::string::npos) return "";
  const size_t name = begin + lead.size();
  const size_t end = log_line.find('\'', name);
  return end == std::string::npos ? "" : log_line.substr(name, end - name);
}

// What a failed parse means, from the line protobuf logged while parsing.
Status ParseFailure(const std::string& log_line, const google::protobuf::Message& request) {
  const std::string field = Utf8Field(log_line);
  if (!field.empty()) {
    return InvalidArgument("request does not parse: field " + field +
                           " is not valid UTF-8 (proto3 string fields must be UTF-8)");
  }
  return InvalidArgument("request does not parse as " + request.GetTypeName());
}

}  // namespace

Status ParseRequest(const grpc::ByteBuffer& in, google::protobuf::Message* request) {
  InstallLogHandler();
  // No buffer at all: the call ended (cancelled by the client, or its
  // deadline passed) before a request arrived. Not the daemon's error.
  if (!in.Valid()) return Cancelled("no request arrived: the call ended first");
  // Parsed from the received slices (a copy of the buffer shares them):
  // no contiguous copy of a request of up to max_message_bytes.
  grpc::ByteBuffer shared(in);
  grpc::ProtoBufferReader reader(&shared);
  if (!reader.status().ok()) return Internal("cannot read the request bytes");
  std::string log_line;
  captured = &log_line;
  const bool ok = request->ParseFromZeroCopyStream(&reader);
  captured = nullptr;
  if (ok) return Status::Ok();
  return ParseFailure(log_line, *request);
}

Status ParseRequestBytes(std::string_view bytes, google::protobuf::Message* request) {
  InstallLogHandler();
  std::string log_line;
  captured = &log_line;
  const bool ok = request->ParseFromArray(bytes.data(), static_cast<int>(bytes.size()));
  captured = nullptr;
  if (ok) return Status::Ok();
  return ParseFailure(log_line, *request);
}

Status ParseRequestField(google::protobuf::io::CodedInputStream* input,
                         google::protobuf::Message* request) {
  InstallLogHandler();
  std::string log_line;
  captured = &log_line;
  const bool ok = request->ParseFromCodedStream(input) && input->ConsumedEntireMessage();
  captured = nullptr;
  if (ok) return Status::Ok();
  return ParseFailure(log_line, *request);
}

Status SerializeResponse(const google::protobuf::Message& response, grpc::ByteBuffer* out) {
  std::string bytes;
  if (!response.SerializeToString(&bytes)) return Internal("cannot serialize the response");
  grpc::Slice slice(bytes);
  *out = grpc::ByteBuffer(&slice, 1);
  return Status::Ok();
}

int MethodIndex(const google::protobuf::ServiceDescriptor* service, const char* method) {
  const google::protobuf::MethodDescriptor* m = service->FindMethodByName(method);
  return m == nullptr ? -1 : m->index();
}

}  // namespace gnmr
