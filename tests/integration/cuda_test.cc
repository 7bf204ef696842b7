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

#include "ciuic/checkpoint.h"
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

// checkpoint::Load with device destinations (map_location='cuda' in Python): every chunk is
// verified and, when asked, widened on the host, then copied from pinned staging to the
// "device". The bytes equal a host load's, slices and upcasts included, and a bad chunk or a
// failed copy is an error naming the tensor.
TEST_F(CudaTest, CheckpointLoadsStraightToTheDevice) {
  ASSERT_TRUE(cuda::Available());  // loads the fake, which FakeStats finds loaded
  auto cluster = MiniCluster::Start({});
  ASSERT_TRUE(cluster.ok()) << cluster.status().ToString();
  auto c = (*cluster)->NewClient();
  ASSERT_TRUE(c.ok());
  std::vector<float> w((3u << 18) + 3);
  for (size_t i = 0; i < w.size(); ++i)
    w[i] = static_cast<float>(i % 1000) * 0.37f - 100.0f;
  std::vector<int64_t> steps(100 * 50);
  for (size_t i = 0; i < steps.size(); ++i)
    steps[i] = static_cast<int64_t>(i * 7919);
  auto spec = [](const std::string& name, const std::string& dtype, std::vector<int64_t> shape,
                 const void* data) {
    checkpoint::TensorToSave t;
    t.name = name;
    t.dtype = dtype;
    t.shape = std::move(shape);
    t.data = data;
    t.nbytes = 1;
    for (int64_t d : t.shape)
      t.nbytes *= static_cast<size_t>(d);
    t.nbytes *= checkpoint::DTypeSize(dtype);
    return t;
  };
  checkpoint::SaveOptions so;
  so.chunk_bytes = 1 << 20;
  so.convert = {{"model.*", checkpoint::HalfKind::kBFloat16}};
  const int64_t n = static_cast<int64_t>(w.size());
  ASSERT_TRUE(checkpoint::Save(
                  **c, "/ck/1",
                  {spec("w", "float32", {n}, w.data()), spec("model.h", "float32", {n}, w.data()),
                   spec("steps", "int64", {100, 50}, steps.data())},
                  so)
                  .ok());
  auto m = checkpoint::ReadManifest(**c, "/ck/1");
  ASSERT_TRUE(m.ok()) << m.status().ToString();

  // The host's load, to compare with.
  std::vector<float> host_h(w.size());
  std::vector<int64_t> host_rows(50 * 50);
  checkpoint::TensorToLoad hh{"model.h", host_h.data(), host_h.size() * 4};
  hh.upcast_fp32 = true;
  checkpoint::TensorToLoad hr{"steps", host_rows.data(), host_rows.size() * 8, 10, 60};
  ASSERT_TRUE(checkpoint::Load(**c, *m, {hh, hr}).ok());

  std::vector<float> dev_w(w.size()), dev_h(w.size());
  std::vector<int64_t> dev_rows(50 * 50);
  auto device_loads = [&] {
    checkpoint::TensorToLoad a{"w", dev_w.data(), dev_w.size() * 4};
    checkpoint::TensorToLoad b{"model.h", dev_h.data(), dev_h.size() * 4};
    b.upcast_fp32 = true;
    checkpoint::TensorToLoad r{"steps", dev_rows.data(), dev_rows.size() * 8, 10, 60};
    for (auto* t : {&a, &b, &r})
      t->dst_on_device = true;
    return std::vector<checkpoint::TensorToLoad>{a, b, r};
  };
  checkpoint::LoadOptions lo;
  lo.device_chunk_bytes = 256 << 10;  // several pieces per stored chunk, two streams in turn
  const Stats s0 = FakeStats();
  Status st = checkpoint::Load(**c, *m, device_loads(), lo);
  ASSERT_TRUE(st.ok()) << st.ToString();
  const Stats s1 = FakeStats();
  EXPECT_EQ(dev_w, w);
  EXPECT_EQ(dev_h, host_h);
  EXPECT_EQ(dev_rows, host_rows);
  EXPECT_EQ(std::vector<int64_t>(steps.begin() + 500, steps.begin() + 3000), dev_rows);
  EXPECT_EQ(s1.bytes - s0.bytes, (dev_w.size() + dev_h.size()) * 4 + dev_rows.size() * 8);
  EXPECT_EQ(s1.unpinned, 0u);  // every copy from pinned staging
  EXPECT_GT(s1.copies - s0.copies, 3u * 4);

  // A failed copy: an error naming CUDA's reason and the tensor.
  setenv("FAKE_CUDART_FAIL_COPY", std::to_string(FakeStats().copies + 3).c_str(), 1);
  st = checkpoint::Load(**c, *m, device_loads(), lo);
  unsetenv("FAKE_CUDART_FAIL_COPY");
  EXPECT_EQ(st.code(), StatusCode::kIoError) << st.ToString();
  EXPECT_NE(st.message().find("cudaMemcpyAsync"), std::string::npos) << st.ToString();
  EXPECT_NE(st.message().find("tensor '"), std::string::npos) << st.ToString();

  // A flipped byte fails the load naming the tensor, before anything of it is trusted.
  const checkpoint::ShardInfo& sh = m->Find("w")->shards[0];
  {
    auto f = (*c)->Open("/ck/1/" + sh.file, O_RDWR, 0);
    ASSERT_TRUE(f.ok());
    char byte = 0;
    ASSERT_TRUE((*f)->Pread(&byte, 1, sh.offset + 4321).ok());
    byte ^= 0x10;
    ASSERT_TRUE((*f)->Pwrite(&byte, 1, sh.offset + 4321).ok());
    ASSERT_TRUE((*f)->Close().ok());
  }
  st = checkpoint::Load(**c, *m, device_loads(), lo);
  EXPECT_EQ(st.code(), StatusCode::kCorruption) << st.ToString();
  EXPECT_NE(st.message().find("'w'"), std::string::npos) << st.ToString();
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
