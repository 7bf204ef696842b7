// ReadToDevice (include/ciuic/cuda.h) through the dlopen path, against the fake CUDA runtime of
// tests/cuda/fake_cudart.c (device memory is host memory; copies land only when their stream
// is synchronized, so reusing a staging buffer too early shows as wrong bytes).
#include "ciuic/cuda.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <stdlib.h>

#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "ciuic/client.h"
#include "testing/mini_cluster.h"
#include "tests/integration/test_util.h"

namespace ciuic::testing {
namespace {

struct Stats {
  uint64_t registers, copies, bytes, unpinned, syncs;
};

Stats FakeStats() {
  void* h = dlopen(CIUIC_FAKE_CUDART, RTLD_NOW | RTLD_NOLOAD);
  EXPECT_NE(h, nullptr);
  Stats s{};
  if (h == nullptr)
    return s;
  auto fn = reinterpret_cast<void (*)(uint64_t*)>(dlsym(h, "fake_cudart_stats"));
  uint64_t v[5] = {};
  fn(v);
  dlclose(h);
  return {v[0], v[1], v[2], v[3], v[4]};
}

class CudaTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { setenv("CIUIC_CUDART", CIUIC_FAKE_CUDART, 1); }
};

// 21 MiB + 5,000 bytes in 4 MiB chunks: every byte reaches the "device", copied from pinned
// staging memory that the co-located OSSes filled, two streams taking turns; a read past the
// end stops at it and leaves the rest of the device range alone.
TEST_F(CudaTest, ReadsReachTheDeviceThroughPinnedSharedMemory) {
  ASSERT_TRUE(cuda::Available());
  auto cluster = MiniCluster::Start({});
  ASSERT_TRUE(cluster.ok()) << cluster.status().ToString();
  ClientOptions o;
  o.uid = 0;
  o.gid = 0;
  auto c = (*cluster)->NewClient(o);
  ASSERT_TRUE(c.ok());
  const std::string data = Pattern((21 << 20) + 5000, 77);
  FileLayout layout = Striped(4, 1 << 20);
  OpenOptions oo;
  oo.layout = &layout;
  {
    auto f = (*c)->Open("/weights", O_CREAT | O_WRONLY, 0644, oo);
    ASSERT_TRUE(f.ok());
    ASSERT_TRUE((*f)->Pwrite(data.data(), data.size(), 0).ok());
    ASSERT_TRUE((*f)->Close().ok());
  }
  auto f = (*c)->Open("/weights", O_RDONLY, 0);
  ASSERT_TRUE(f.ok());
  std::vector<char> device(data.size() + 8192, 'd');
  const Stats s0 = FakeStats();
  const uint64_t shm0 = (*cluster)->shm_reads();
  cuda::DeviceReadOptions ro;
  ro.chunk_bytes = 4 << 20;
  auto n = cuda::ReadToDevice(**c, **f, 0, device.size(), device.data(), ro);
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(*n, data.size());
  EXPECT_EQ(std::memcmp(device.data(), data.data(), data.size()), 0);
  EXPECT_EQ(device[data.size()], 'd');  // past the end: untouched
  const Stats s1 = FakeStats();
  EXPECT_EQ(s1.copies - s0.copies, 6u);
  EXPECT_EQ(s1.bytes - s0.bytes, data.size());
  EXPECT_EQ(s1.unpinned, 0u);
  EXPECT_GE((*cluster)->shm_reads() - shm0, 21u);  // the OSSes placed the chunks in staging

  // Again, from an offset: the staging memory is registered once per client.
  std::vector<char> part(3 << 20, 'x');
  n = cuda::ReadToDevice(**c, **f, 7777, part.size(), part.data(), ro);
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, part.size());
  EXPECT_EQ(std::memcmp(part.data(), data.data() + 7777, part.size()), 0);
  EXPECT_EQ(FakeStats().registers, s1.registers);

  // A copy that fails is an error naming CUDA's reason.
  setenv("FAKE_CUDART_FAIL_COPY", std::to_string(FakeStats().copies + 2).c_str(), 1);
  n = cuda::ReadToDevice(**c, **f, 0, device.size(), device.data(), ro);
  unsetenv("FAKE_CUDART_FAIL_COPY");
  EXPECT_EQ(n.status().code(), StatusCode::kIoError);
  EXPECT_NE(n.status().message().find("cudaMemcpyAsync"), std::string::npos)
      << n.status().ToString();
  EXPECT_NE(n.status().message().find("fake"), std::string::npos);

  // Bad input.
  ro.chunk_bytes = 1000;
  EXPECT_EQ(cuda::ReadToDevice(**c, **f, 0, 4096, device.data(), ro).status().code(),
            StatusCode::kInvalidArgument);
}

// Without a CUDA runtime everything else works and a device read is a clear error (in a fresh
// process: the runtime is looked for once per process).
TEST(CudaAbsentTest, NoRuntimeIsAClearError) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        setenv("CIUIC_CUDART", "/nonexistent/libcudart.so", 1);
        std::string why;
        const bool ok = cuda::Available(&why);
        const bool named = why.find("/nonexistent/libcudart.so") != std::string::npos &&
                           why.find("CIUIC_CUDART") != std::string::npos;
        _exit(!ok && named ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace ciuic::testing
