// Unary methods that parse their own request, so that a request that does
// not parse gets a precise INVALID_ARGUMENT instead of gRPC's empty
// UNIMPLEMENTED.
//
// Why: proto3 string fields must hold UTF-8, so a request with a job id or
// unit name in, say, Latin-1 fails to parse; gRPC C++'s callback server
// (1.51, grpcpp/impl/codegen/server_callback_handlers.h) answers a request
// it cannot deserialize with UNIMPLEMENTED and an empty message, which tells
// a client nothing. A method routed through RouteRawUnary receives the raw
// bytes instead; ParseRequest names the offending field (protobuf names it
// in its own error log line, which is captured while parsing):
//
//   INVALID_ARGUMENT: request does not parse: field
//   gnmr.v1.RegisterRequest.job_id is not valid UTF-8 (proto3 string fields
//   must be UTF-8)
//
// Used for every unary method of Gnmr and Admin. The Session stream is a
// raw method too (session_reactor.h): a stream message that does not parse
// ends the stream with the same INVALID_ARGUMENT, and its writes send bytes
// serialized once per message for every stream of a job.
#pragma once

#include <string>
#include <string_view>

#include <google/protobuf/descriptor.h>
#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/message.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/impl/codegen/server_callback_handlers.h>

#include "daemon/server/request_gate.h"
#include "gnmr/status.h"

namespace gnmr {

// Parses `in` into `request`; InvalidArgument naming the field when a
// string is not UTF-8, or saying the bytes are not the message.
Status ParseRequest(const grpc::ByteBuffer& in, google::protobuf::Message* request);
// The same for bytes already in one piece (a relay lane's message).
Status ParseRequestBytes(std::string_view bytes, google::protobuf::Message* request);
// The same for one message read from `input` up to its current limit (a
// field of a message read piece by piece: lane_reader.h).
Status ParseRequestField(google::protobuf::io::CodedInputStream* input,
                         google::protobuf::Message* request);

// Serializes `response` into `out`.
Status SerializeResponse(const google::protobuf::Message& response, grpc::ByteBuffer* out);

// The index gRPC gives `method` of `service` (the order of the .proto).
int MethodIndex(const google::protobuf::ServiceDescriptor* service, const char* method);

// Runs `body`; an exception of any type becomes INTERNAL (nothing may
// escape into gRPC's threads).
template <typename Body>
Status Guarded(const Body& body) {
  try {
    return body();
  } catch (const std::exception& e) {
    return Internal(std::string("internal error: ") + e.what());
  } catch (...) {
    return Internal("internal error: unknown exception");
  }
}

// A handler for a raw unary method (give it to MarkMethodRawCallback):
// admits the request's bytes through `gate` (may be null; request_gate.h),
// parses the request, runs
//   Status body(grpc::CallbackServerContext*, const Req&, Resp*)
// (guarded), admits the response's bytes through `gate` too when
// `gate_answer` (read methods only: a mutation that was done must not be
// answered RESOURCE_EXHAUSTED; a refused answer is dropped unsent),
// serializes it, and ends the call with
//   grpc::ServerUnaryReactor* done(grpc::CallbackServerContext*, const Req&,
//                                  const Status&)
// which records, logs and finishes it.
template <typename Req, typename Resp, typename Body, typename Done>
grpc::internal::MethodHandler* RawUnaryHandler(Body body, Done done, RequestGate* gate,
                                               bool gate_answer = false) {
  return new grpc::internal::CallbackUnaryHandler<grpc::ByteBuffer, grpc::ByteBuffer>(
      [body, done, gate, gate_answer](grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* in,
                                      grpc::ByteBuffer* out) {
        RequestGate::Ticket ticket;  // outlives req and resp: ends last
        Req req;
        Resp resp;
        Status s = gate != nullptr ? gate->Admit(in->Length(), &ticket) : Status::Ok();
        if (s.ok()) s = ParseRequest(*in, &req);
        if (s.ok()) s = Guarded([&] { return body(ctx, req, &resp); });
        if (s.ok() && gate != nullptr && gate_answer) {
          s = gate->AdmitAnswer(resp.ByteSizeLong(), &ticket);
        }
        if (s.ok()) s = SerializeResponse(resp, out);
        return done(ctx, req, s);
      });
}

}  // namespace gnmr
