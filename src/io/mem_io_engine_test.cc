#include "io/mem_io_engine.h"

#include <fcntl.h>

#include <gtest/gtest.h>

#include "common/buffer.h"
#include "common/fault.h"

namespace ciuic::io {
namespace {

std::string ReadAll(MemIoEngine& e, const std::string& path) {
  auto fh = e.Open(path, O_RDONLY);
  if (!fh.ok())
    return "<" + fh.status().ToString() + ">";
  std::string out(e.Stat(*fh)->size, '\0');
  auto n = e.Pread(*fh, out.data(), out.size(), 0);
  EXPECT_TRUE(n.ok());
  EXPECT_TRUE(e.Close(*fh).ok());
  return out;
}

class MemIoEngineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(e_.MkdirAll("/d").ok());
    ASSERT_TRUE(e_.SyncDir("/").ok());
  }
  FileHandle Create(const std::string& path) {
    auto fh = e_.Open(path, O_RDWR | O_CREAT);
    EXPECT_TRUE(fh.ok());
    return fh.value_or(-1);
  }
  MemIoEngine e_;
};

TEST_F(MemIoEngineTest, PowerLossDropsUnsyncedData) {
  FileHandle fh = Create("/d/f");
  ASSERT_TRUE(e_.PwriteAll(fh, "synced", 6, 0).ok());
  ASSERT_TRUE(e_.Fdatasync(fh).ok());
  ASSERT_TRUE(e_.PwriteAll(fh, "LATER!-more", 11, 0).ok());
  EXPECT_EQ(ReadAll(e_, "/d/f"), "LATER!-more");
  e_.SimulatePowerLoss();
  EXPECT_EQ(ReadAll(e_, "/d/f"), "synced");
  // Handles of before the power loss are gone.
  EXPECT_FALSE(e_.PwriteAll(fh, "x", 1, 0).ok());
}

TEST_F(MemIoEngineTest, NewFileSurvivesOnlyOnceSyncedOrItsDirectoryIs) {
  FileHandle a = Create("/d/a");
  FileHandle b = Create("/d/b");
  ASSERT_TRUE(e_.PwriteAll(a, "aaa", 3, 0).ok());
  ASSERT_TRUE(e_.PwriteAll(b, "bbb", 3, 0).ok());
  ASSERT_TRUE(e_.Fsync(a).ok());  // data and creation of a
  FileHandle c = Create("/d/c");
  ASSERT_TRUE(e_.Close(c).ok());
  e_.SimulatePowerLoss();
  EXPECT_EQ(ReadAll(e_, "/d/a"), "aaa");
  EXPECT_EQ(e_.StatPath("/d/b").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(e_.StatPath("/d/c").status().code(), StatusCode::kNotFound);

  c = Create("/d/c");
  ASSERT_TRUE(e_.PwriteAll(c, "ccc", 3, 0).ok());
  ASSERT_TRUE(e_.SyncDir("/d").ok());  // the name, not the data
  e_.SimulatePowerLoss();
  EXPECT_EQ(ReadAll(e_, "/d/c"), "");
}

TEST_F(MemIoEngineTest, UnlinkAndRenameAreDurableOnlyAfterSyncDir) {
  FileHandle a = Create("/d/a");
  ASSERT_TRUE(e_.PwriteAll(a, "A", 1, 0).ok());
  ASSERT_TRUE(e_.Fsync(a).ok());
  ASSERT_TRUE(e_.Rename("/d/a", "/d/b").ok());
  e_.SimulatePowerLoss();
  EXPECT_EQ(ReadAll(e_, "/d/a"), "A");
  EXPECT_EQ(e_.StatPath("/d/b").status().code(), StatusCode::kNotFound);

  ASSERT_TRUE(e_.Rename("/d/a", "/d/b").ok());
  ASSERT_TRUE(e_.SyncDir("/d").ok());
  ASSERT_TRUE(e_.Unlink("/d/b").ok());
  e_.SimulatePowerLoss();
  EXPECT_EQ(ReadAll(e_, "/d/b"), "A");
  ASSERT_TRUE(e_.Unlink("/d/b").ok());
  ASSERT_TRUE(e_.SyncDir("/d").ok());
  e_.SimulatePowerLoss();
  EXPECT_EQ(e_.StatPath("/d/b").status().code(), StatusCode::kNotFound);
}

TEST_F(MemIoEngineTest, UnsyncedDirectoryVanishes) {
  ASSERT_TRUE(e_.MkdirAll("/d/sub").ok());
  FileHandle f = Create("/d/sub/f");
  ASSERT_TRUE(e_.Fsync(f).ok());
  e_.SimulatePowerLoss();
  EXPECT_EQ(e_.ListDir("/d/sub").status().code(), StatusCode::kNotFound);
}

TEST_F(MemIoEngineTest, FaultPointsInjectErrors) {
  FileHandle fh = Create("/d/f");
  {
    ScopedFault f("io.write", Status::NoSpace("injected"), 1);
    EXPECT_EQ(e_.PwriteAll(fh, "x", 1, 0).code(), StatusCode::kNoSpace);
    EXPECT_TRUE(e_.PwriteAll(fh, "x", 1, 0).ok());  // only one hit armed
  }
  {
    ScopedFault f("io.read", Status::IoError("injected"));
    char c;
    EXPECT_EQ(e_.Pread(fh, &c, 1, 0).status().code(), StatusCode::kIoError);
  }
  {
    ScopedFault f("io.fsync", Status::IoError("injected"));
    EXPECT_EQ(e_.Fdatasync(fh).code(), StatusCode::kIoError);
  }
}

TEST_F(MemIoEngineTest, DirectIoRejectsMisalignedAccess) {
  auto fh = e_.Open("/d/direct", O_RDWR | O_CREAT | O_DIRECT);
  ASSERT_TRUE(fh.ok());
  AlignedBuffer buf(8192);
  EXPECT_TRUE(e_.PwriteAll(*fh, buf.data(), 4096, 0).ok());
  EXPECT_EQ(e_.PwriteAll(*fh, buf.data() + 1, 4096, 0).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(e_.PwriteAll(*fh, buf.data(), 4096, 512).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(e_.Pread(*fh, buf.data(), 100, 0).status().code(), StatusCode::kInvalidArgument);
}

TEST_F(MemIoEngineTest, CapacityLimitGivesNoSpaceAndKeepsOldData) {
  e_.SetCapacity(10000);
  FileHandle fh = Create("/d/f");
  std::string data(8000, 'd');
  ASSERT_TRUE(e_.PwriteAll(fh, data.data(), data.size(), 0).ok());
  EXPECT_EQ(e_.PwriteAll(fh, data.data(), data.size(), 8000).code(), StatusCode::kNoSpace);
  EXPECT_EQ(ReadAll(e_, "/d/f"), data);
  auto fs = e_.StatFs("/d");
  ASSERT_TRUE(fs.ok());
  EXPECT_EQ(fs->capacity, 10000u);
  EXPECT_EQ(fs->free, 2000u);
  ASSERT_TRUE(e_.Close(fh).ok());
  ASSERT_TRUE(e_.Unlink("/d/f").ok());
  EXPECT_EQ(e_.UsedBytes(), 0u);
}

TEST_F(MemIoEngineTest, HandleLimitFailsOpensLikeEmfile) {
  EXPECT_EQ(e_.OpenHandles(), 0u);
  FileHandle a = Create("/d/a");
  EXPECT_EQ(e_.OpenHandles(), 1u);
  e_.SetMaxOpenHandles(1);
  auto b = e_.Open("/d/b", O_RDWR | O_CREAT);
  ASSERT_EQ(b.status().code(), StatusCode::kUnavailable) << b.status().ToString();
  EXPECT_NE(b.status().message().find("Too many open files"), std::string::npos);
  EXPECT_FALSE(e_.StatPath("/d/b").ok());  // nothing created
  ASSERT_TRUE(e_.Close(a).ok());
  EXPECT_EQ(e_.OpenHandles(), 0u);
  b = e_.Open("/d/b", O_RDWR | O_CREAT);
  ASSERT_TRUE(b.ok());
  ASSERT_TRUE(e_.Close(*b).ok());
  e_.SetMaxOpenHandles(0);
}

}  // namespace
}  // namespace ciuic::io
