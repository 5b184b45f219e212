// Status and StatusOr: the error type at every boundary.
#include "gnmr/status.h"

#include <memory>
#include <string>

#include <gtest/gtest.h>

namespace gnmr {
namespace {

TEST(Status, EveryCodeHasAHelperAndAName) {
  const std::pair<Status, StatusCode> cases[] = {
      {Cancelled("m"), StatusCode::kCancelled},
      {Unknown("m"), StatusCode::kUnknown},
      {InvalidArgument("m"), StatusCode::kInvalidArgument},
      {DeadlineExceeded("m"), StatusCode::kDeadlineExceeded},
      {NotFound("m"), StatusCode::kNotFound},
      {AlreadyExists("m"), StatusCode::kAlreadyExists},
      {PermissionDenied("m"), StatusCode::kPermissionDenied},
      {ResourceExhausted("m"), StatusCode::kResourceExhausted},
      {FailedPrecondition("m"), StatusCode::kFailedPrecondition},
      {Aborted("m"), StatusCode::kAborted},
      {OutOfRange("m"), StatusCode::kOutOfRange},
      {Unimplemented("m"), StatusCode::kUnimplemented},
      {Internal("m"), StatusCode::kInternal},
      {Unavailable("m"), StatusCode::kUnavailable},
      {DataLoss("m"), StatusCode::kDataLoss},
      {Unauthenticated("m"), StatusCode::kUnauthenticated},
  };
  for (const auto& [s, code] : cases) {
    EXPECT_EQ(s.code(), code);
    EXPECT_FALSE(s.ok());
    EXPECT_EQ(s.ToString(), std::string(StatusCodeName(code)) + ": m");
  }
  EXPECT_EQ(Status::Ok().ToString(), "OK");
}

TEST(StatusOr, AnOkStatusIsNotAValue) {
  StatusOr<int> s = Status::Ok();
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kInternal);
}

TEST(StatusOr, ValueOfAnErrorThrowsWithTheStatus) {
  StatusOr<std::string> s = NotFound("no job 'x'");
  try {
    (void)s.value();
    FAIL() << "no exception";
  } catch (const BadStatusOrAccess& e) {
    EXPECT_NE(std::string(e.what()).find("NOT_FOUND: no job 'x'"), std::string::npos);
  }
  StatusOr<std::string> v = std::string("ok");
  EXPECT_EQ(*v, "ok");
  EXPECT_TRUE(v.status().ok());
}

StatusOr<int> Half(int x) {
  if (x % 2 != 0) return InvalidArgument("odd");
  return x / 2;
}

Status Quarter(int x, int* out) {
  GNMR_ASSIGN_OR_RETURN(int h, Half(x));
  GNMR_ASSIGN_OR_RETURN(*out, Half(h));
  return Status::Ok();
}

Status Check(bool fail) {
  GNMR_RETURN_IF_ERROR(fail ? DataLoss("bad") : Status::Ok());
  return AlreadyExists("reached the end");
}

TEST(StatusMacros, ReturnOrAssign) {
  int q = 0;
  EXPECT_TRUE(Quarter(8, &q).ok());
  EXPECT_EQ(q, 2);
  EXPECT_EQ(Quarter(6, &q).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Check(true).code(), StatusCode::kDataLoss);
  EXPECT_EQ(Check(false).code(), StatusCode::kAlreadyExists);
  // Move-only values pass through.
  auto make = []() -> StatusOr<std::unique_ptr<int>> { return std::make_unique<int>(7); };
  auto use = [&]() -> Status {
    GNMR_ASSIGN_OR_RETURN(std::unique_ptr<int> p, make());
    return *p == 7 ? Status::Ok() : Internal("wrong");
  };
  EXPECT_TRUE(use().ok());
}

}  // namespace
}  // namespace gnmr
