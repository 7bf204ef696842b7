#include "common/status.h"

#include <cerrno>

#include <gtest/gtest.h>

namespace ciuic {
namespace {

Result<int> Half(int v) {
  if (v % 2 != 0)
    return Status::InvalidArgument("odd");
  return v / 2;
}

Result<int> Quarter(int v) {
  CIUIC_ASSIGN_OR_RETURN(int h, Half(v));
  CIUIC_ASSIGN_OR_RETURN(int q, Half(h));
  return q;
}

TEST(StatusTest, DefaultIsOk) {
  Status s;
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(s.ToErrno(), 0);
}

TEST(StatusTest, ErrnoRoundTrip) {
  for (int e : {ENOENT, EEXIST, ENOTDIR, EISDIR, ENOTEMPTY, EACCES, EPERM, EINVAL, ENOSPC,
                ENAMETOOLONG, EXDEV, ELOOP}) {
    Status s = Status::FromErrno(e, "op");
    EXPECT_EQ(s.ToErrno(), e) << s.ToString();
  }
}

TEST(StatusTest, DefaultResultIsError) {
  Result<int> r;
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInternal);
}

TEST(StatusTest, AssignOrReturnPropagates) {
  EXPECT_EQ(Quarter(8).value(), 2);
  EXPECT_EQ(Quarter(6).status().code(), StatusCode::kInvalidArgument);
}

TEST(StatusTest, ResultFromOkStatusIsInternalError) {
  Result<int> r{Status::OK()};
  EXPECT_FALSE(r.ok());
}

}  // namespace
}  // namespace ciuic
