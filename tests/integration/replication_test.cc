// Replicated objects on a MiniCluster (docs/design.md "Replication"): chains in distinct failure
// domains, writes that reach every copy, reads and writes that go on while an OSS is stopped,
// killed or loses power, an OSS cut off from the MDS that refuses old chain versions, and the
// errors for impossible replica counts.
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <thread>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "ciuic.pb.h"
#include "ciuic/client.h"
#include "common/fid.h"
#include "net/msg_types.h"
#include "net/pb_convert.h"
#include "net/rpc.h"
#include "oss/oss_server.h"
#include "testing/mini_cluster.h"
#include "tests/integration/test_util.h"

namespace ciuic::testing {
namespace {

FileLayout Replicated(uint32_t count, uint32_t replicas, uint32_t stripe_size = 1u << 20) {
  FileLayout l = Striped(count, stripe_size);
  l.components[0].replicas = replicas;
  return l;
}

std::unique_ptr<MiniCluster> StartCluster(int num_oss, MiniClusterOptions o = {}) {
  o.num_oss = num_oss;
  if (o.osts_per_oss == 2 && num_oss > 2)
    o.osts_per_oss = 1;
  auto c = MiniCluster::Start(o);
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return c.ok() ? std::move(*c) : nullptr;
}

// `num_oss` OSSes of one OST each.
std::unique_ptr<MiniCluster> StartOnePerOss(int num_oss) {
  MiniClusterOptions o;
  o.osts_per_oss = 1;
  return StartCluster(num_oss, o);
}

std::unique_ptr<Client> Connect(MiniCluster* c) {
  auto r = c->NewClient();
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? std::move(*r) : nullptr;
}

Status WriteWithLayout(Client* c,
                       const std::string& path,
                       const std::string& data,
                       const FileLayout& layout) {
  OpenOptions oo;
  oo.layout = &layout;
  auto f = c->Open(path, O_CREAT | O_WRONLY | O_TRUNC, 0644, oo);
  if (!f.ok())
    return f.status();
  auto n = (*f)->Pwrite(data.data(), data.size(), 0);
  if (!n.ok())
    return n.status();
  CIUIC_RETURN_IF_ERROR((*f)->Fsync());
  return (*f)->Close();
}

// The chain of each stripe of `path`'s first component.
std::vector<ChainStatus> ChainsOf(Client* c, const std::string& path) {
  std::vector<ChainStatus> out;
  auto l = c->GetLayout(path);
  EXPECT_TRUE(l.ok()) << l.status().ToString();
  auto chains = c->Chains();
  EXPECT_TRUE(chains.ok()) << chains.status().ToString();
  if (!l.ok() || !chains.ok())
    return out;
  for (uint32_t id : l->components[0].osts) {
    for (const auto& ch : *chains) {
      if (ch.id == id)
        out.push_back(ch);
    }
  }
  return out;
}

// Which OSS (index) serves OST `ost` in a cluster with `per` OSTs per OSS.
int OssOf(uint32_t ost, int per) {
  return static_cast<int>(ost) / per;
}

// Waits until every chain of `path` has no member served by OSS `oss` serving.
bool WaitOffline(Client* c, const std::string& path, int oss, int per, int timeout_ms = 10000) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (std::chrono::steady_clock::now() < deadline) {
    bool all = true;
    for (const auto& ch : ChainsOf(c, path)) {
      for (const auto& m : ch.members) {
        if (OssOf(m.ost, per) == oss && m.state == "serving")
          all = false;
      }
    }
    if (all)
      return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

TEST(ReplicationTest, EveryCopyHoldsTheBytesOnDistinctOsses) {
  auto cluster = StartCluster(3);
  ASSERT_NE(cluster, nullptr);
  auto c = Connect(cluster.get());
  ASSERT_NE(c, nullptr);
  const std::string data = Pattern(6 << 20, 1);
  Status w = WriteWithLayout(c.get(), "/r2", data, Replicated(3, 2));
  ASSERT_TRUE(w.ok()) << w.ToString();
  auto back = c->ReadFile("/r2");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_TRUE(*back == data);

  auto l = c->GetLayout("/r2");
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(l->components[0].replicas, 2u);
  const std::vector<ChainStatus> chains = ChainsOf(c.get(), "/r2");
  ASSERT_EQ(chains.size(), 3u);
  auto st = c->Stat("/r2");
  ASSERT_TRUE(st.ok());
  std::set<uint32_t> heads;
  for (uint32_t s = 0; s < 3; ++s) {
    ASSERT_EQ(chains[s].members.size(), 2u);
    EXPECT_NE(chains[s].members[0].ost, chains[s].members[1].ost);  // one OST per OSS here
    heads.insert(chains[s].members[0].ost);
    // Both copies on disk, byte for byte the same stripe units.
    const ObjectId obj{Fid{st->ino, st->fid_mds, st->fid_ver}, l->components[0].id, s};
    std::string copies[2];
    for (int k = 0; k < 2; ++k) {
      const std::string file = FindObjectFile(
          cluster->OstDir(chains[s].members[static_cast<size_t>(k)].ost), obj.FileName());
      ASSERT_FALSE(file.empty()) << "no copy of " << obj.FileName() << " on OST "
                                 << chains[s].members[static_cast<size_t>(k)].ost;
      std::ifstream in(file, std::ios::binary);
      copies[k].assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
      copies[k].resize(2 << 20);  // the object is 2 MiB (the file may be grown ahead of it)
    }
    EXPECT_TRUE(copies[0] == copies[1]) << "stripe " << s;
    EXPECT_TRUE(copies[0].substr(0, 1 << 20) == data.substr(s << 20, 1 << 20));
  }
  EXPECT_EQ(heads.size(), 3u) << "heads spread over the OSTs";

  // The cluster default applies to files whose layout does not say.
  MiniClusterOptions o;
  o.default_replicas = 3;
  auto three = StartCluster(3, o);
  ASSERT_NE(three, nullptr);
  auto c3 = Connect(three.get());
  ASSERT_TRUE(c3->WriteFile("/plain", data).ok());
  auto l3 = c3->GetLayout("/plain");
  ASSERT_TRUE(l3.ok());
  EXPECT_EQ(l3->components[0].replicas, 3u);
  EXPECT_EQ(ChainsOf(c3.get(), "/plain").at(0).members.size(), 3u);
  auto back3 = c3->ReadFile("/plain");
  ASSERT_TRUE(back3.ok());
  EXPECT_TRUE(*back3 == data);
}

TEST(ReplicationTest, ReplicasBeyondTheFailureDomainsAreAClearError) {
  MiniClusterOptions o;
  o.host_labels = {"rack-a", "rack-a"};  // two OSSes, one domain
  auto cluster = StartCluster(2, o);
  ASSERT_NE(cluster, nullptr);
  auto c = Connect(cluster.get());
  FileLayout l = Replicated(1, 2);
  OpenOptions oo;
  oo.layout = &l;
  auto f = c->Open("/x", O_CREAT | O_WRONLY, 0644, oo);
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(f.status().message().find("2 replicas need 2 failure domains; the cluster has 1"),
            std::string::npos)
      << f.status().ToString();
  ASSERT_TRUE(c->Mkdir("/d").ok());
  Status s = c->SetLayout("/d", l);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  // One copy is fine, and a replicated layout may not name OSTs.
  FileLayout named = Replicated(1, 1);
  EXPECT_TRUE(c->SetLayout("/d", named).ok());
}

// Waits until every chain of the cluster has all its members serving.
bool WaitAllServing(Client* c, int timeout_ms = 30000) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (std::chrono::steady_clock::now() < deadline) {
    auto chains = c->Chains();
    bool all = chains.ok() && !chains->empty();
    if (chains.ok()) {
      for (const auto& ch : *chains) {
        for (const auto& m : ch.members)
          all &= m.state == "serving";
      }
    }
    if (all)
      return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

TEST(ReplicationTest, ReadsAndWritesGoOnWhileAnOssIsDown) {
  auto cluster = StartCluster(3);
  ASSERT_NE(cluster, nullptr);
  auto c = Connect(cluster.get());
  const std::string a = Pattern(5 << 20, 2);
  ASSERT_TRUE(WriteWithLayout(c.get(), "/a", a, Replicated(3, 2)).ok());
  ASSERT_TRUE(cluster->StopOss(0).ok());

  // Reads fail over to the other copy at once; writes wait for the new chains.
  auto back = c->ReadFile("/a");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_TRUE(*back == a);
  const std::string b = Pattern(5 << 20, 3);
  ASSERT_TRUE(WriteWithLayout(c.get(), "/b", b, Replicated(3, 2)).ok());
  const std::string a2 = Pattern(1 << 20, 4);
  {
    auto f = c->Open("/a", O_WRONLY);
    ASSERT_TRUE(f.ok());
    ASSERT_TRUE((*f)->Pwrite(a2.data(), a2.size(), 2 << 20).ok());
    ASSERT_TRUE((*f)->Fsync().ok());
    ASSERT_TRUE((*f)->Close().ok());
  }
  EXPECT_TRUE(WaitOffline(c.get(), "/a", 0, 1));
  std::string want = a;
  want.replace(2 << 20, a2.size(), a2);
  for (int round = 0; round < 2; ++round) {
    auto ra = c->ReadFile("/a");
    ASSERT_TRUE(ra.ok()) << ra.status().ToString();
    EXPECT_TRUE(*ra == want);
    auto rb = c->ReadFile("/b");
    ASSERT_TRUE(rb.ok()) << rb.status().ToString();
    EXPECT_TRUE(*rb == b);
    if (round == 1)
      break;
    // The OSS comes back: its copies missed writes, so they serve nothing until they catch up,
    // and a fresh client reads the same bytes.
    ASSERT_TRUE(cluster->RestartOss(0).ok());
    ASSERT_TRUE(cluster->WaitForOsts(3).ok());
    c = Connect(cluster.get());
  }
  // It catches up, and serves again.
  EXPECT_TRUE(WaitAllServing(c.get()));
  // Removing the file reaches every copy (the OST work log names each member).
  ASSERT_TRUE(c->Unlink("/b").ok());
}

// Where two byte strings part: "N bytes, want M; first difference at X (n differ)".
std::string Diff(const std::string& got, const std::string& want) {
  const size_t n = std::min(got.size(), want.size());
  size_t first = n, count = 0;
  for (size_t i = 0; i < n; ++i) {
    if (got[i] != want[i]) {
      first = std::min(first, i);
      ++count;
    }
  }
  return fmt::format("{} bytes, want {}; first difference at {} ({} bytes differ)", got.size(),
                     want.size(), first, count);
}

TEST(ReplicationTest, ConcurrentIoSurvivesOssStopsWithoutErrors) {
  auto cluster = StartCluster(3);
  ASSERT_NE(cluster, nullptr);
  auto c = Connect(cluster.get());
  ASSERT_TRUE(c->Mkdir("/w").ok());
  ASSERT_TRUE(c->SetLayout("/w", Replicated(2, 2, 256 << 10)).ok());
  std::atomic<bool> stop{false};
  std::mutex mu;
  std::map<std::string, std::string> acked;  // path -> bytes fsynced
  std::atomic<int> errors{0};
  std::string first_error;
  auto note_error = [&](const Status& s) {
    std::lock_guard lock(mu);
    if (errors.fetch_add(1) == 0)
      first_error = s.ToString();
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < 3; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; !stop; ++i) {
        const std::string path = fmt::format("/w/f{}-{}", t, i);
        const std::string data = Pattern(static_cast<size_t>((300 << 10) + i * 4097),
                                         static_cast<uint64_t>(t * 1000 + i));
        auto f = c->Open(path, O_CREAT | O_WRONLY | O_TRUNC, 0644);
        if (!f.ok()) {
          note_error(f.status());
          continue;
        }
        auto n = (*f)->Pwrite(data.data(), data.size(), 0);
        Status s = n.ok() ? (*f)->Fsync() : n.status();
        Status cs = (*f)->Close();
        if (!s.ok() || !cs.ok()) {
          note_error(s.ok() ? cs : s);
          continue;
        }
        std::lock_guard lock(mu);
        acked[path] = data;
      }
    });
  }
  threads.emplace_back([&] {  // a reader of what was acknowledged
    std::mt19937 rng(7);
    while (!stop) {
      std::string path, want;
      {
        std::lock_guard lock(mu);
        if (acked.empty())
          continue;
        auto it = acked.begin();
        std::advance(it, static_cast<long>(rng() % acked.size()));
        path = it->first;
        want = it->second;
      }
      auto got = c->ReadFile(path);
      if (!got.ok()) {
        note_error(got.status());
      } else if (*got != want) {
        note_error(Status::Corruption(path + " read back different bytes: " + Diff(*got, want)));
      }
    }
  });
  // Stop each OSS in turn while the others serve; bring it back (it returns offline).
  for (int oss = 0; oss < 3; ++oss) {
    std::this_thread::sleep_for(std::chrono::milliseconds(700));
    ASSERT_TRUE(cluster->StopOss(oss).ok());
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    ASSERT_TRUE(cluster->RestartOss(oss).ok());
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  stop = true;
  for (auto& t : threads)
    t.join();
  EXPECT_EQ(errors.load(), 0) << first_error;
  // Every acknowledged file is whole, read by a fresh client.
  auto fresh = Connect(cluster.get());
  size_t checked = 0;
  for (const auto& [path, want] : acked) {
    auto got = fresh->ReadFile(path);
    if (!got.ok()) {
      // Chains whose every serving copy is on a stopped OSS wait for it: none here (each OSS
      // came back, and a chain keeps its last serving member).
      ADD_FAILURE() << path << ": " << got.status().ToString();
      continue;
    }
    EXPECT_TRUE(*got == want) << path << ": " << Diff(*got, want);
    ++checked;
  }
  EXPECT_GT(checked, 10u);
}

TEST(ReplicationTest, AnOssThatLostPowerServesNothingItMayHaveLost) {
  MiniClusterOptions o;
  o.power_loss = true;
  o.osts_per_oss = 1;
  auto cluster = StartCluster(2, o);
  ASSERT_NE(cluster, nullptr);
  auto c = Connect(cluster.get());
  const std::string synced = Pattern(3 << 20, 5);
  ASSERT_TRUE(WriteWithLayout(c.get(), "/s", synced, Replicated(2, 2)).ok());
  // Written, not synced: the OSS that loses power drops it, the other keeps it.
  const std::string later = Pattern(1 << 20, 6);
  {
    auto f = c->Open("/s", O_WRONLY);
    ASSERT_TRUE(f.ok());
    ASSERT_TRUE((*f)->Pwrite(later.data(), later.size(), 0).ok());
    ASSERT_TRUE((*f)->Flush().ok());
    ASSERT_TRUE(cluster->PowerCycleOss(0).ok());
    // The fsync goes to the chains as they are now: the other copy is whole, so it succeeds.
    EXPECT_TRUE(WaitOffline(c.get(), "/s", 0, 1));
    Status s = (*f)->Fsync();
    EXPECT_TRUE(s.ok()) << s.ToString();
    ASSERT_TRUE((*f)->Close().ok());
  }
  std::string want = synced;
  want.replace(0, later.size(), later);
  auto back = Connect(cluster.get())->ReadFile("/s");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_TRUE(*back == want);
}

TEST(ReplicationTest, AnOssCutOffFromTheMdsTakesNoWritesUnderAnOldChain) {
  auto cluster = StartOnePerOss(2);
  ASSERT_NE(cluster, nullptr);
  auto c = Connect(cluster.get());
  ASSERT_TRUE(WriteWithLayout(c.get(), "/p", Pattern(1 << 20, 7), Replicated(1, 2)).ok());
  const ChainStatus before = ChainsOf(c.get(), "/p").at(0);
  const uint32_t head = before.members[0].ost;
  const int cut = OssOf(head, 1);
  auto st = c->Stat("/p");
  ASSERT_TRUE(st.ok());
  auto l = c->GetLayout("/p");
  ASSERT_TRUE(l.ok());

  // The head loses the MDS (not the clients): the MDS takes it out of the chain.
  cluster->oss(cut)->TEST_PauseHeartbeats(true);
  ASSERT_TRUE(WaitOffline(c.get(), "/p", cut, 1));
  const ChainStatus after = ChainsOf(c.get(), "/p").at(0);
  EXPECT_GT(after.version, before.version);

  // A writer that still holds the old chain reaches the cut-off OSS: refused.
  net::EventLoop loop(1);
  net::ChannelOptions co;
  co.secret = cluster->admin_secret();
  co.key_id = 1;
  auto ch = net::RpcChannel::Connect(&loop, HostPort{"127.0.0.1", cluster->oss_port(cut)}, co);
  ASSERT_TRUE(ch.ok()) << ch.status().ToString();
  pb::WriteReq req;
  req.set_ost(head);
  net::ToPb(ObjectId{Fid{st->ino, st->fid_mds, st->fid_ver}, l->components[0].id, 0},
            req.mutable_obj());
  req.set_offset(0);
  req.set_chain(before.id);
  req.set_chain_version(before.version);
  const std::string stale = Pattern(4096, 8);
  auto r = (*ch)->Call(net::MsgType::kWrite, req, {net::ConstSpan{stale.data(), stale.size()}});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable) << r.status().ToString();
  (*ch)->Close();

  // The member still in touch with the MDS refuses the old version too, once its next
  // heartbeat told it of the new one (a write with the old chain reaches it only through the
  // cut-off head, which refuses first).
  const uint32_t other = before.members[1].ost;
  auto ch2 = net::RpcChannel::Connect(&loop, HostPort{"127.0.0.1", cluster->oss_port(1 - cut)}, co);
  ASSERT_TRUE(ch2.ok()) << ch2.status().ToString();
  req.set_ost(other);
  Result<net::Reply> r2 = Status::Internal("not sent");
  for (int i = 0; i < 100; ++i) {
    r2 = (*ch2)->Call(net::MsgType::kWrite, req, {net::ConstSpan{stale.data(), stale.size()}});
    if (!r2.ok())
      break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_FALSE(r2.ok());
  EXPECT_EQ(r2.status().code(), StatusCode::kUnavailable) << r2.status().ToString();
  EXPECT_NE(r2.status().message().find("stale chain"), std::string::npos) << r2.status().ToString();
  (*ch2)->Close();
  loop.Stop();

  // The application's writes go to the new chain without an error, and read back.
  const std::string fresh = Pattern(1 << 20, 9);
  ASSERT_TRUE(c->WriteFile("/p", fresh).ok());
  auto back = c->ReadFile("/p");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_TRUE(*back == fresh);
  cluster->oss(cut)->TEST_PauseHeartbeats(false);
}

}  // namespace
}  // namespace ciuic::testing

namespace ciuic::testing {
namespace {

TEST(ReplicationTest, AnOssOfAnotherClusterIsRefusedWithAClearError) {
  auto cluster = StartOnePerOss(2);
  ASSERT_NE(cluster, nullptr);
  net::EventLoop loop(1);
  net::ChannelOptions co;
  co.secret = cluster->admin_secret();
  co.key_id = 1;
  co.role = net::Role::kOss;
  auto ch = net::RpcChannel::Connect(&loop, HostPort{"127.0.0.1", cluster->mds_port()}, co);
  ASSERT_TRUE(ch.ok()) << ch.status().ToString();
  pb::RegisterOssReq req;
  req.set_oss_addr("127.0.0.1:1");
  req.set_cluster_uuid("00000000-0000-0000-0000-000000000000");
  pb::OstInfo* ost = req.add_osts();
  ost->set_index(0);
  ost->set_capacity(1ull << 30);
  pb::RegisterOssResp resp;
  Status s = (*ch)->CallMsg(net::MsgType::kRegisterOss, req, &resp);
  EXPECT_EQ(s.code(), StatusCode::kPermissionDenied) << s.ToString();
  EXPECT_NE(s.message().find("belongs to cluster '00000000-0000-0000-0000-000000000000'"),
            std::string::npos)
      << s.ToString();
  (*ch)->Close();
  loop.Stop();
  // The chains still name the real OSS of OST 0.
  auto c = Connect(cluster.get());
  ASSERT_TRUE(WriteWithLayout(c.get(), "/ok", Pattern(1 << 20, 10), Replicated(2, 2)).ok());
  auto back = c->ReadFile("/ok");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_TRUE(*back == Pattern(1 << 20, 10));
}

}  // namespace
}  // namespace ciuic::testing

namespace ciuic::testing {
namespace {

// Flips one byte of the data file of `obj` on OST `ost`.
void Corrupt(MiniCluster* cluster, uint32_t ost, const ObjectId& obj, uint64_t offset) {
  const std::string file = FindObjectFile(cluster->OstDir(ost), obj.FileName());
  ASSERT_FALSE(file.empty()) << obj.FileName() << " on OST " << ost;
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(static_cast<std::streamoff>(offset));
  char b = 0;
  f.read(&b, 1);
  b = static_cast<char>(b ^ 0x5a);
  f.seekp(static_cast<std::streamoff>(offset));
  f.write(&b, 1);
}

TEST(ReplicationTest, ACopyThatFailsItsChecksumsIsReadFromAnother) {
  auto cluster = StartOnePerOss(2);
  ASSERT_NE(cluster, nullptr);
  auto c = Connect(cluster.get());
  const std::string data = Pattern(2 << 20, 11);
  ASSERT_TRUE(WriteWithLayout(c.get(), "/crc", data, Replicated(2, 2)).ok());
  auto st = c->Stat("/crc");
  ASSERT_TRUE(st.ok());
  auto l = c->GetLayout("/crc");
  ASSERT_TRUE(l.ok());
  const std::vector<ChainStatus> chains = ChainsOf(c.get(), "/crc");
  ASSERT_EQ(chains.size(), 2u);
  // One copy of each stripe object is damaged: every read still returns the data.
  for (uint32_t s = 0; s < 2; ++s) {
    const ObjectId obj{Fid{st->ino, st->fid_mds, st->fid_ver}, l->components[0].id, s};
    Corrupt(cluster.get(), chains[s].members[s].ost, obj, 4096 + 17);
  }
  for (int round = 0; round < 3; ++round) {
    auto fresh = Connect(cluster.get());
    auto back = fresh->ReadFile("/crc");
    ASSERT_TRUE(back.ok()) << back.status().ToString();
    EXPECT_TRUE(*back == data);
  }
  // Both copies of stripe 0 damaged: an error, never wrong bytes.
  const ObjectId obj0{Fid{st->ino, st->fid_mds, st->fid_ver}, l->components[0].id, 0};
  Corrupt(cluster.get(), chains[0].members[1].ost, obj0, 4096 + 17);
  auto fresh = Connect(cluster.get());
  std::string buf(4096, '\0');
  auto f = fresh->Open("/crc", O_RDONLY);
  ASSERT_TRUE(f.ok());
  auto n = (*f)->Pread(buf.data(), buf.size(), 4096);
  ASSERT_FALSE(n.ok());
  EXPECT_EQ(n.status().code(), StatusCode::kCorruption) << n.status().ToString();
}

// Files of two stripes on two OSSes, each stripe object copied on both.
std::map<std::string, std::string> WriteFiles(Client* c, int n, uint64_t seed) {
  std::map<std::string, std::string> files;
  for (int i = 0; i < n; ++i) {
    const std::string path = fmt::format("/f{}", i);
    files[path] = Pattern((1 << 20) + 4096 * static_cast<size_t>(i) + 17, seed + i);
    Status st = WriteWithLayout(c, path, files[path], Replicated(2, 2, 1u << 20));
    EXPECT_TRUE(st.ok()) << st.ToString();
  }
  return files;
}

// Reads every file back with only OSS `keep` of two running.
void ExpectServedBy(MiniCluster* cluster,
                    int keep,
                    const std::map<std::string, std::string>& want) {
  ASSERT_TRUE(cluster->StopOss(1 - keep).ok());
  auto c = Connect(cluster);
  ASSERT_NE(c, nullptr);
  for (const auto& [path, data] : want) {
    auto back = c->ReadFile(path);
    ASSERT_TRUE(back.ok()) << path << ": " << back.status().ToString();
    EXPECT_TRUE(*back == data) << path;
  }
}

TEST(ReplicationTest, AReturningOssCopiesOnlyWhatItMissed) {
  auto cluster = StartOnePerOss(2);
  ASSERT_NE(cluster, nullptr);
  auto c = Connect(cluster.get());
  std::map<std::string, std::string> files = WriteFiles(c.get(), 8, 100);
  ASSERT_TRUE(cluster->StopOss(1).ok());
  // While OSS 1 is away: one file changes in its first stripe, one file is new, one is removed.
  const std::string patch = Pattern(8192, 7);
  {
    auto f = c->Open("/f3", O_WRONLY);
    ASSERT_TRUE(f.ok());
    ASSERT_TRUE((*f)->Pwrite(patch.data(), patch.size(), 4096).ok());
    ASSERT_TRUE((*f)->Fsync().ok());
    ASSERT_TRUE((*f)->Close().ok());
  }
  files["/f3"].replace(4096, patch.size(), patch);
  files["/new"] = Pattern(300000, 8);
  ASSERT_TRUE(WriteWithLayout(c.get(), "/new", files["/new"], Replicated(2, 2, 1u << 20)).ok());
  ASSERT_TRUE(c->Unlink("/f5").ok());
  files.erase("/f5");
  EXPECT_TRUE(WaitOffline(c.get(), "/f3", 1, 1));

  ASSERT_TRUE(cluster->RestartOss(1).ok());
  ASSERT_TRUE(cluster->WaitForOsts(2).ok());
  ASSERT_TRUE(WaitAllServing(c.get()));
  // Objects compared equal stay; what changed is copied: /f3's first stripe, /new's one stripe.
  EXPECT_EQ(cluster->oss(0)->resync_objects_copied(), 2u);
  // The returned copies hold every byte: they serve alone.
  ExpectServedBy(cluster.get(), 1, files);
}

TEST(ReplicationTest, AnOstReplacedEmptyIsRebuiltFromTheOtherCopy) {
  auto cluster = StartOnePerOss(2);
  ASSERT_NE(cluster, nullptr);
  auto c = Connect(cluster.get());
  std::map<std::string, std::string> files = WriteFiles(c.get(), 6, 200);
  ASSERT_TRUE(cluster->StopOss(1).ok());
  std::error_code ec;
  std::filesystem::remove_all(cluster->OstDir(1), ec);
  ASSERT_FALSE(ec) << ec.message();
  std::filesystem::create_directories(cluster->OstDir(1), ec);
  // Back at once, before the MDS takes it out of its chains: its new stamp says it is empty.
  // (The chains look whole until its registration is processed: wait for the copies first.)
  ASSERT_TRUE(cluster->RestartOss(1).ok());
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (cluster->oss(0)->resync_objects_copied() < 12 &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_TRUE(cluster->WaitForOsts(2).ok());
  ASSERT_TRUE(WaitAllServing(c.get()));
  // Every stripe object: two per file (the second stripe of each is 1 MiB + a little).
  EXPECT_EQ(cluster->oss(0)->resync_objects_copied(), 12u);
  EXPECT_GE(cluster->oss(0)->resync_bytes_copied(), uint64_t{6} << 20);
  ExpectServedBy(cluster.get(), 1, files);
}

// Writes and fsyncs 64 KiB pieces of the files at random until stopped; keeps `files` equal to
// what was acknowledged, and any error in `errors`.
class Writer {
 public:
  Writer(Client* c, std::map<std::string, std::string>* files)
      : c_(c), files_(files), thread_([this] { Run(); }) {}
  ~Writer() { Stop(); }
  void Stop() {
    stop_ = true;
    if (thread_.joinable())
      thread_.join();
  }
  std::vector<std::string> errors;
  std::atomic<int> writes{0};

 private:
  void Run() {
    std::mt19937_64 rng(42);
    std::vector<std::string> paths;
    for (const auto& [p, d] : *files_)
      paths.push_back(p);
    while (!stop_) {
      const std::string& path = paths[rng() % paths.size()];
      const uint64_t size = (*files_)[path].size();
      const uint64_t off = rng() % (size - (64 << 10));
      const std::string piece = Pattern(64 << 10, rng());
      auto f = c_->Open(path, O_WRONLY);
      Status st = f.status();
      if (st.ok())
        st = (*f)->Pwrite(piece.data(), piece.size(), off).status();
      if (st.ok())
        st = (*f)->Fsync();
      if (st.ok())
        st = (*f)->Close();
      if (!st.ok()) {
        errors.push_back(path + ": " + st.ToString());
        continue;
      }
      (*files_)[path].replace(off, piece.size(), piece);
      ++writes;
    }
  }
  Client* c_;
  std::map<std::string, std::string>* files_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// kill -9 (a stop) or a power cut of an OSS under concurrent fsynced writes, which go on while
// it catches up: no write fails, and its copies then hold every acknowledged byte alone.
enum class Outage { kKill, kPowerCut, kReplacedEmpty };

void KillCatchUpAndServe(Outage outage) {
  const bool power_cut = outage == Outage::kPowerCut;
  MiniClusterOptions o;
  o.osts_per_oss = 1;
  o.power_loss = power_cut;
  o.resync_bytes_per_s = 2 << 20;  // a resync of several seconds, with the writes going on
  auto cluster = StartCluster(2, o);
  ASSERT_NE(cluster, nullptr);
  auto c = Connect(cluster.get());
  std::map<std::string, std::string> files = WriteFiles(c.get(), 6, 300);
  std::string during;
  {
    Writer w(c.get(), &files);
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    if (power_cut) {
      ASSERT_TRUE(cluster->PowerCycleOss(1).ok());
    } else {
      ASSERT_TRUE(cluster->StopOss(1).ok());
      if (outage == Outage::kReplacedEmpty) {
        std::error_code ec;
        std::filesystem::remove_all(cluster->OstDir(1), ec);
        ASSERT_FALSE(ec) << ec.message();
        std::filesystem::create_directories(cluster->OstDir(1), ec);
      }
      // A file written whole while the OSS is out: its copies must come over.
      EXPECT_TRUE(WaitOffline(c.get(), "/f0", 1, 1));
      during = Pattern(1 << 20, 301);
      EXPECT_TRUE(WriteWithLayout(c.get(), "/during", during, Replicated(2, 2, 1u << 20)).ok());
      ASSERT_TRUE(cluster->RestartOss(1).ok());
    }
    // Its registration takes its members out (new epoch or stamp): only then do whole chains
    // mean that it caught up.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (!cluster->oss(1)->registered() && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    auto watcher = Connect(cluster.get());
    EXPECT_TRUE(WaitAllServing(watcher.get(), 60000));
    // Writes go on once it serves again: a few more land before the writer stops (counted, not
    // timed: a faster catch-up leaves fewer writes inside it, never none after it).
    const int served = w.writes.load();
    const auto more = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (w.writes.load() < served + 5 && std::chrono::steady_clock::now() < more) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    w.Stop();
    EXPECT_TRUE(w.errors.empty()) << w.errors.size() << " failed writes, first: " << w.errors[0];
    EXPECT_GE(w.writes.load(), served + 5);
  }
  if (!power_cut) {
    files["/during"] = during;
    EXPECT_GT(cluster->oss(0)->resync_objects_copied(), 0u);
  }
  ExpectServedBy(cluster.get(), 1, files);
}

TEST(ReplicationTest, AKilledOssCatchesUpUnderWritesAndThenServesAlone) {
  KillCatchUpAndServe(Outage::kKill);
}

TEST(ReplicationTest, AnOssThatLostPowerCatchesUpUnderWritesAndThenServesAlone) {
  KillCatchUpAndServe(Outage::kPowerCut);
}

TEST(ReplicationTest, AnOstReplacedEmptyIsRebuiltUnderWritesAndThenServesAlone) {
  KillCatchUpAndServe(Outage::kReplacedEmpty);
}

// Scrub counts summed over the OSTs.
OstStatus::Scrub ScrubTotals(Client* c) {
  OstStatus::Scrub t;
  auto map = c->OstMap();
  EXPECT_TRUE(map.ok()) << map.status().ToString();
  if (!map.ok())
    return t;
  for (const auto& o : *map) {
    t.passes += o.scrub.passes;
    t.bad += o.scrub.bad;
    t.repaired += o.scrub.repaired;
    t.lost += o.scrub.lost;
    t.bytes += o.scrub.bytes;
  }
  return t;
}

TEST(ReplicationTest, TheScrubberRepairsBadCopiesFromGoodOnes) {
  MiniClusterOptions o;
  o.osts_per_oss = 1;
  o.scrub_bytes_per_s = 64 << 20;
  o.scrub_pause_ms = 300;
  auto cluster = StartCluster(2, o);
  ASSERT_NE(cluster, nullptr);
  auto c = Connect(cluster.get());
  std::map<std::string, std::string> files;
  files["/scrub"] = Pattern(2 << 20, 12);
  ASSERT_TRUE(WriteWithLayout(c.get(), "/scrub", files["/scrub"], Replicated(2, 2)).ok());
  const std::string single = Pattern(100000, 13);
  ASSERT_TRUE(WriteWithLayout(c.get(), "/single", single, Striped(1, 1u << 20)).ok());
  auto st = c->Stat("/scrub");
  auto l = c->GetLayout("/scrub");
  ASSERT_TRUE(st.ok() && l.ok());
  const std::vector<ChainStatus> chains = ChainsOf(c.get(), "/scrub");
  ASSERT_EQ(chains.size(), 2u);
  // Stripe 0's copy on its chain's head and stripe 1's on the other member go bad.
  for (uint32_t s = 0; s < 2; ++s) {
    const ObjectId obj{Fid{st->ino, st->fid_mds, st->fid_ver}, l->components[0].id, s};
    Corrupt(cluster.get(), chains[s].members[s].ost, obj, 4096 * (s + 3) + 9);
  }
  // The one-copy file's only copy too: found and counted lost, not repaired.
  auto ss = c->Stat("/single");
  auto sl = c->GetLayout("/single");
  ASSERT_TRUE(ss.ok() && sl.ok());
  Corrupt(cluster.get(), sl->components[0].osts[0],
          ObjectId{Fid{ss->ino, ss->fid_mds, ss->fid_ver}, sl->components[0].id, 0}, 100);
  // Both copies of a replicated object: no good source, so lost on both OSTs, never served.
  const std::string both = Pattern(50000, 14);
  ASSERT_TRUE(WriteWithLayout(c.get(), "/both", both, Replicated(1, 2)).ok());
  auto bs = c->Stat("/both");
  auto bl = c->GetLayout("/both");
  ASSERT_TRUE(bs.ok() && bl.ok());
  const ObjectId both_obj{Fid{bs->ino, bs->fid_mds, bs->fid_ver}, bl->components[0].id, 0};
  const std::vector<ChainStatus> both_chains = ChainsOf(c.get(), "/both");
  ASSERT_EQ(both_chains.size(), 1u);
  for (const auto& m : both_chains[0].members)
    Corrupt(cluster.get(), m.ost, both_obj, 200);

  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  OstStatus::Scrub t;
  while (std::chrono::steady_clock::now() < deadline) {
    t = ScrubTotals(c.get());
    if (t.repaired >= 2 && t.lost >= 3)
      break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_EQ(t.repaired, 2u);
  EXPECT_EQ(t.lost, 3u);  // the one-copy object, and both copies of /both
  EXPECT_EQ(t.bad, 5u);
  EXPECT_GT(t.bytes, uint64_t{4} << 20);
  // A second pass finds nothing new: the repaired copies verify.
  const uint64_t passes = t.passes;
  while (std::chrono::steady_clock::now() < deadline && ScrubTotals(c.get()).passes < passes + 2)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(ScrubTotals(c.get()).bad, 5u);
  {
    auto f = c->Open("/both", O_RDONLY);
    ASSERT_TRUE(f.ok());
    std::string buf(4096, '\0');
    auto n = (*f)->Pread(buf.data(), buf.size(), 0);
    ASSERT_FALSE(n.ok());
    EXPECT_EQ(n.status().code(), StatusCode::kCorruption) << n.status().ToString();
  }
  // Each copy, alone, holds every byte.
  ExpectServedBy(cluster.get(), 1, files);
  ASSERT_TRUE(cluster->RestartOss(0).ok());
  ASSERT_TRUE(cluster->WaitForOsts(2).ok());
  ASSERT_TRUE(WaitAllServing(c.get()));
  ASSERT_TRUE(cluster->RestartOss(1).ok());
  ExpectServedBy(cluster.get(), 0, files);
}

}  // namespace
}  // namespace ciuic::testing
