// MemObjectStore's own behaviour beyond the contract suite: its test hooks.
#include "objstore/mem_object_store.h"

#include <algorithm>
#include <atomic>

#include <gtest/gtest.h>

#include "objstore/object_store_contract.h"

namespace ciuic::objstore {
namespace {

TEST(MemObjectStoreTest, DescribesItselfByName) {
  MemObjectStore::Options opts;
  opts.name = "cold";
  EXPECT_EQ(MemObjectStore(opts).Describe(), "mem://cold");
}

TEST(MemObjectStoreTest, FailNextFailsThatManyCallsOfAnyMethod) {
  MemObjectStore store;
  CIUIC_ASSERT_OK(store.Put("k", "v"));
  store.TEST_FailNext(3, Status::Unavailable("throttled"));
  Status put = store.Put("k2", "v");
  EXPECT_EQ(put.code(), StatusCode::kUnavailable);
  EXPECT_NE(put.message().find("throttled"), std::string::npos);
  EXPECT_NE(put.message().find("mem://test"), std::string::npos) << put.ToString();
  EXPECT_EQ(store.Head("k").status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(store.List(ListOptions()).status().code(), StatusCode::kUnavailable);
  // The fourth call goes through, and the failed put left nothing.
  CIUIC_EXPECT_OK(store.Head("k"));
  EXPECT_EQ(store.Head("k2").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(store.TEST_size(), 1u);
}

TEST(MemObjectStoreTest, CountsCallsPerMethod) {
  MemObjectStore store;
  CIUIC_ASSERT_OK(store.Put("a", "1"));
  CIUIC_ASSERT_OK(store.Put("b", "2"));
  CIUIC_ASSERT_OK(store.PutStream("c", 3, [](uint64_t, std::span<char> dst) {
    std::fill(dst.begin(), dst.end(), 'c');
    return Status::OK();
  }));
  CIUIC_ASSERT_OK(store.GetAll("c"));  // a Head and a Get
  CIUIC_ASSERT_OK(store.List(ListOptions()));
  CIUIC_ASSERT_OK(store.Delete("a"));
  CIUIC_ASSERT_OK(store.Delete("a"));
  EXPECT_EQ(store.Head("zz").status().code(), StatusCode::kNotFound);  // failures count too
  MemObjectStore::CallCounts calls = store.TEST_calls();
  EXPECT_EQ(calls.put, 2u);
  EXPECT_EQ(calls.put_stream, 1u);
  EXPECT_EQ(calls.head, 2u);
  EXPECT_EQ(calls.get, 1u);
  EXPECT_EQ(calls.list, 1u);
  EXPECT_EQ(calls.del, 2u);
}

TEST(MemObjectStoreTest, PutStreamPartsMayRunInParallel) {
  MemObjectStore::Options opts;
  opts.part_bytes = 1000;
  opts.parallel_parts = 4;
  MemObjectStore store(opts);
  const std::string data = testing::TestBytes(10'500, 5);
  std::atomic<int> calls{0};
  CIUIC_ASSERT_OK(store.PutStream("k", data.size(), [&](uint64_t offset, std::span<char> dst) {
    ++calls;
    std::copy_n(data.data() + offset, dst.size(), dst.data());
    return Status::OK();
  }));
  EXPECT_EQ(calls.load(), 11);
  EXPECT_TRUE(store.GetAll("k").value_or("") == data);
}

}  // namespace
}  // namespace ciuic::objstore
