// The ObjectStore contract suite: value-parameterized tests that every backend must pass.
// The TEST_Ps live in object_store_contract.cc, built as the CMake object library
// `objstore_contract`; a backend's test binary links it and instantiates the suite:
//
//   ciuic_add_test(objstore_s3_test SRCS s3_store_test.cc DEPS ciuic_objstore objstore_contract)
//
//   INSTANTIATE_TEST_SUITE_P(S3, ObjectStoreContractTest,
//                            ::testing::Values(ContractBackend{
//                                .name = "S3",
//                                .caps = {},
//                                .open = [] { ... a store on a fresh, empty prefix ... }}),
//                            ContractBackendName);
//
// Each test opens its own empty store through ContractBackend::open and drops it at the end;
// the shared_ptr's deleter is where a backend cleans up (a temp directory, a bucket prefix).
// Tests that need many objects keep them few (CI runs the suite on two cores).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "common/status.h"
#include "objstore/object_store.h"

namespace ciuic::objstore::testing {

// What a backend cannot do that S3 can; the suite checks the documented behaviour instead.
struct BackendCapabilities {
  // False where a key and keys below it ("a" and "a/b") cannot both exist (LocalDirStore):
  // putting one while the other exists fails with kAlreadyExists naming both keys.
  bool key_and_children_coexist = true;
  // The longest component (the bytes between two '/') a key may have.
  size_t max_component_bytes = 1024;
  // The largest piece PutStream asks its source for, if the backend has a fixed one (0: not
  // known). The stream tests size their objects to take a few pieces.
  uint64_t stream_piece_bytes = 0;
  // The longest key the store takes (S3Store: 1024 less its root prefix and the '/').
  size_t max_key_bytes = 1024;
  // True where keys must be valid UTF-8 (S3): the key tests use UTF-8 keys only and check that
  // other keys are refused with kInvalidArgument.
  bool utf8_keys_only = false;

  // s3rver quirks (src/objstore/README.md), each false only for the s3rver instance:
  // A ranged GET of an empty object is answered (206 with Content-Length 1 and no body).
  bool ranged_get_of_empty_object = true;
  // Any delimiter rolls up right. s3rver cuts a rolled-up prefix one character past the
  // delimiter's start, and never enters a directory whose path below the prefix holds the
  // delimiter, so keys there roll up only through objects of their own directory. Without it
  // the listing tests roll up at "/" only, over keys whose every directory holds an object.
  bool any_delimiter = true;
  // Listings come in key order when they take several pages, and rolled-up prefixes count
  // toward max_keys (s3rver cuts pages in its directory walk's order and does not count them).
  // Without it the pagination tests page through flat keys without a delimiter only.
  bool pages_in_key_order = true;
  // An overwrite is atomic: a reader sees the old or the new object whole (s3rver rewrites the
  // file in place).
  bool atomic_overwrite = true;
};

struct ContractBackend {
  std::string name;  // the instance's name in test names: letters, digits and '_'
  BackendCapabilities caps;
  // Returns a new, empty store for one test. The store is dropped (and, through the
  // shared_ptr's deleter, cleaned up) when the test ends.
  std::function<Result<std::shared_ptr<ObjectStore>>()> open;
};

class ObjectStoreContractTest : public ::testing::TestWithParam<ContractBackend> {
 protected:
  void SetUp() override;
  void TearDown() override { store_.reset(); }

  ObjectStore& store() { return *store_; }
  const BackendCapabilities& caps() const { return GetParam().caps; }

  std::shared_ptr<ObjectStore> store_;
};

// Prints a backend as its name (gtest would otherwise dump its bytes).
void PrintTo(const ContractBackend& backend, std::ostream* os);

// Names an instance after ContractBackend::name (the fourth INSTANTIATE_TEST_SUITE_P argument).
std::string ContractBackendName(const ::testing::TestParamInfo<ContractBackend>& info);

// Returns `n` pseudo-random bytes determined by `seed`.
std::string TestBytes(size_t n, uint64_t seed);

// A new empty directory under the system's temp directory, removed with all it holds when
// dropped.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Returns the status of a Status or a Result, for the macros below.
inline const Status& StatusOf(const Status& s) {
  return s;
}
template <typename T>
const Status& StatusOf(const Result<T>& r) {
  return r.status();
}

}  // namespace ciuic::objstore::testing

#define CIUIC_ASSERT_OK(expr)                                             \
  do {                                                                    \
    const auto& _r = (expr);                                              \
    const ::ciuic::Status& _s = ::ciuic::objstore::testing::StatusOf(_r); \
    ASSERT_TRUE(_s.ok()) << _s.ToString();                                \
  } while (0)
#define CIUIC_EXPECT_OK(expr)                                             \
  do {                                                                    \
    const auto& _r = (expr);                                              \
    const ::ciuic::Status& _s = ::ciuic::objstore::testing::StatusOf(_r); \
    EXPECT_TRUE(_s.ok()) << _s.ToString();                                \
  } while (0)
#define CIUIC_EXPECT_CODE(expr, want)                                     \
  do {                                                                    \
    const auto& _r = (expr);                                              \
    const ::ciuic::Status& _s = ::ciuic::objstore::testing::StatusOf(_r); \
    EXPECT_EQ(_s.code(), ::ciuic::StatusCode::want) << _s.ToString();     \
  } while (0)
