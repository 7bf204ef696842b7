#include "common/fault.h"

#include <gtest/gtest.h>

namespace ciuic {
namespace {

TEST(FaultTest, ArmedPointFiresCountTimes) {
  EXPECT_TRUE(CIUIC_FAULT("test.point").ok());
  {
    ScopedFault f("test.point", Status::IoError("injected"), 2);
    EXPECT_EQ(CIUIC_FAULT("test.point").code(), StatusCode::kIoError);
    EXPECT_EQ(CIUIC_FAULT("test.point").code(), StatusCode::kIoError);
    EXPECT_TRUE(CIUIC_FAULT("test.point").ok());
    EXPECT_EQ(f.hits(), 2);
  }
  EXPECT_TRUE(CIUIC_FAULT("test.point").ok());
}

}  // namespace
}  // namespace ciuic
