// HSM on a MiniCluster (docs/design.md "HSM"): archive / release / restore / remove through the
// client, the OSSes copying stripe objects to the cluster's in-memory cold tier, the MDS keeping
// the state. Real servers, real RocksDB, TCP; the cold tier is the in-memory object store the
// OSSes share in this process (mem://<cluster uuid>), so a test can corrupt or delete a copy.
#include "client/hsm.h"

#include <fcntl.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <functional>
#include <future>
#include <thread>

#include <gtest/gtest.h>

#include "ciuic/client.h"
#include "client/client_core.h"
#include "common/fault.h"
#include "common/fid.h"
#include "net/pb_convert.h"
#include "objstore/object_store_factory.h"
#include "testing/mini_cluster.h"
#include "tests/integration/test_util.h"

namespace ciuic::testing {
namespace {

std::unique_ptr<MiniCluster> StartCluster(bool power_loss = false) {
  MiniClusterOptions o;
  o.power_loss = power_loss;
  auto c = MiniCluster::Start(o);
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return c.ok() ? std::move(*c) : nullptr;
}

std::unique_ptr<Client> Connect(MiniCluster* c, bool short_timeouts = false) {
  ClientOptions o;
  if (short_timeouts) {
    o.ost_retry_ms = 1000;
    o.io_timeout_ms = 5000;
    o.mds_timeout_ms = 3000;
  }
  auto cl = c->NewClient(o);
  EXPECT_TRUE(cl.ok()) << cl.status().ToString();
  return cl.ok() ? std::move(*cl) : nullptr;
}

// Writes `data` over 4 stripes of 64 KiB (every OST of the default cluster) and fsyncs it.
Status WriteStriped(Client& c, const std::string& path, const std::string& data) {
  const FileLayout layout = Striped(4, 64 << 10);
  OpenOptions oo;
  oo.layout = &layout;
  CIUIC_ASSIGN_OR_RETURN(auto f, c.Open(path, O_CREAT | O_TRUNC | O_WRONLY, 0644, oo));
  CIUIC_RETURN_IF_ERROR(f->Pwrite(data.data(), data.size(), 0).status());
  CIUIC_RETURN_IF_ERROR(f->Fsync());
  return f->Close();
}

std::shared_ptr<objstore::MemObjectStore> ColdTier(MiniCluster& c) {
  return objstore::SharedMemObjectStore(c.cluster_uuid());
}

// Every key of the cold tier, in order.
std::vector<std::string> ColdKeys(MiniCluster& c) {
  std::vector<std::string> out;
  objstore::ListOptions lo;
  for (;;) {
    auto page = ColdTier(c)->List(lo);
    EXPECT_TRUE(page.ok());
    if (!page.ok())
      return out;
    for (const auto& o : page->objects)
      out.push_back(o.key);
    if (page->next.empty())
      return out;
    lo.start = page->next;
  }
}

// The archived data objects (not the .crc ones) of version `version`.
std::vector<std::string> DataKeys(MiniCluster& c, uint64_t version) {
  std::vector<std::string> out;
  const std::string mid = "/" + std::to_string(version) + "/";
  for (const std::string& k : ColdKeys(c)) {
    if (k.find(mid) != std::string::npos && k.size() > 4 && k.substr(k.size() - 4) != ".crc")
      out.push_back(k);
  }
  return out;
}

// How many of the file's 4 stripe objects exist on the OSTs.
int ObjectsOnOsts(MiniCluster& c, const FileStat& st) {
  int n = 0;
  for (uint32_t s = 0; s < 4; ++s) {
    const ObjectId id{Fid{st.ino, st.fid_mds, st.fid_ver}, 1, s};
    for (int ost = 0; ost < c.num_osts(); ++ost) {
      if (!FindObjectFile(c.OstDir(static_cast<uint32_t>(ost)), id.FileName()).empty())
        ++n;
    }
  }
  return n;
}

// Waits until the OSSes applied the release (the objects are gone).
bool WaitObjectsGone(MiniCluster& c, const FileStat& st) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (std::chrono::steady_clock::now() < deadline) {
    if (ObjectsOnOsts(c, st) == 0)
      return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

HsmState StateOf(Client& c, const std::string& path) {
  auto s = c.HsmGetState(path);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return s.ok() ? s->state : HsmState::kNone;
}

// A reader's restore is recorded when the OSSes report its end, after the read returned
// (restore by extents): the state once it settles on `want` (or what it is after 20 s).
HsmState WaitState(Client& c, const std::string& path, HsmState want) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (std::chrono::steady_clock::now() < deadline) {
    auto s = c.HsmGetState(path);
    if (s.ok() && s->state == want)
      return want;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return StateOf(c, path);
}

TEST(HsmTest, ArchiveReleaseReadGivesTheSameBytesAndFreesTheObjects) {
  auto cluster = StartCluster();
  ASSERT_NE(cluster, nullptr);
  auto c = Connect(cluster.get());
  ASSERT_NE(c, nullptr);
  const std::string data = Pattern((1 << 20) + 12345, 1);
  ASSERT_TRUE(WriteStriped(*c, "/f", data).ok());
  auto before = c->Stat("/f");
  ASSERT_TRUE(before.ok());
  EXPECT_EQ(StateOf(*c, "/f"), HsmState::kNone);

  ASSERT_TRUE(c->HsmArchive("/f").ok());
  auto s = c->HsmGetState("/f");
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->state, HsmState::kArchived);
  EXPECT_EQ(s->archived_version, before->data_version);
  EXPECT_EQ(s->backend, "mem://" + cluster->cluster_uuid());
  // 4 objects and their CRCs, under <uuid>/<fid>/<data version>/.
  EXPECT_EQ(ColdKeys(*cluster).size(), 8u);
  EXPECT_EQ(DataKeys(*cluster, before->data_version).size(), 4u);
  EXPECT_EQ(ObjectsOnOsts(*cluster, *before), 4);
  ASSERT_TRUE(c->HsmArchive("/f").ok());  // already archived: nothing to do

  ASSERT_TRUE(c->HsmRelease("/f").ok());
  EXPECT_EQ(StateOf(*c, "/f"), HsmState::kReleased);
  EXPECT_TRUE(WaitObjectsGone(*cluster, *before));
  auto released = c->Stat("/f");
  ASSERT_TRUE(released.ok());
  EXPECT_EQ(released->size, before->size);
  EXPECT_EQ(released->mtime_sec, before->mtime_sec);
  EXPECT_EQ(released->mtime_nsec, before->mtime_nsec);
  EXPECT_EQ(released->data_version, before->data_version);

  // A read restores transparently, and the restore does not change the data version.
  auto got = c->ReadFile("/f");
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_TRUE(*got == data);
  EXPECT_EQ(WaitState(*c, "/f", HsmState::kArchived), HsmState::kArchived);
  s = c->HsmGetState("/f");
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->state, HsmState::kArchived);
  EXPECT_EQ(s->data_version, before->data_version);
  EXPECT_EQ(ObjectsOnOsts(*cluster, *before), 4);

  // Release and restore by hand; another client reads it back.
  ASSERT_TRUE(c->HsmRelease("/f").ok());
  ASSERT_TRUE(c->HsmRestore("/f").ok());
  EXPECT_EQ(StateOf(*c, "/f"), HsmState::kArchived);
  ASSERT_TRUE(c->HsmRestore("/f").ok());  // not released: nothing to do
  auto c2 = Connect(cluster.get());
  auto got2 = c2->ReadFile("/f");
  ASSERT_TRUE(got2.ok()) << got2.status().ToString();
  EXPECT_TRUE(*got2 == data);
}

// Unlinking an archived file deletes its copy too (OST work log tasks to the OSSes).
TEST(HsmTest, UnlinkDeletesTheArchivedCopy) {
  auto cluster = StartCluster();
  ASSERT_NE(cluster, nullptr);
  auto c = Connect(cluster.get());
  ASSERT_TRUE(WriteStriped(*c, "/u", Pattern(300000, 12)).ok());
  ASSERT_TRUE(WriteStriped(*c, "/keep", Pattern(1000, 13)).ok());
  ASSERT_TRUE(c->HsmArchive("/u").ok());
  ASSERT_TRUE(c->HsmArchive("/keep").ok());
  ASSERT_TRUE(c->HsmRelease("/u").ok());
  const size_t both = ColdKeys(*cluster).size();
  ASSERT_EQ(both, 16u);
  ASSERT_TRUE(c->Unlink("/u").ok());
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (ColdKeys(*cluster).size() != 8u && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(ColdKeys(*cluster).size(), 8u);
  EXPECT_EQ(StateOf(*c, "/keep"), HsmState::kArchived);
  EXPECT_TRUE(c->HsmRelease("/keep").ok());
  EXPECT_EQ(*c->ReadFile("/keep"), Pattern(1000, 13));
}

// Data-set reads skip the MDS (Client::OpenResolved, the loader's path): a released file read
// from a layout resolved before the release is restored too, not read as holes.
TEST(HsmTest, AReadFromAResolvedLayoutRestoresAReleasedFile) {
  auto cluster = StartCluster();
  ASSERT_NE(cluster, nullptr);
  auto c = Connect(cluster.get());
  const std::string data = Pattern(600000, 9);
  ASSERT_TRUE(WriteStriped(*c, "/ds", data).ok());
  auto st = c->Stat("/ds");
  ASSERT_TRUE(st.ok());
  const FileId id{st->ino, st->fid_mds, st->fid_ver};
  auto layout = c->GetLayoutAt(id);
  ASSERT_TRUE(layout.ok());
  ASSERT_TRUE(c->HsmArchive("/ds").ok());
  ASSERT_TRUE(c->HsmRelease("/ds").ok());
  ASSERT_TRUE(WaitObjectsGone(*cluster, *st));
  auto f = c->OpenResolved(id, *layout, st->size, "/ds");
  ASSERT_TRUE(f.ok());
  std::string got(data.size(), '\0');
  auto n = (*f)->Pread(got.data(), got.size(), 0);
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(*n, data.size());
  EXPECT_TRUE(got == data);
  EXPECT_EQ(WaitState(*c, "/ds", HsmState::kArchived), HsmState::kArchived);
}

// Restore by extents through the client: a reader of a released file gets its range while the
// rest of the file still waits on the cold tier (its GETs held back here), and a second client
// opening the file meanwhile joins that restore instead of waiting for it to end.
TEST(HsmTest, AReaderWaitsOnlyForTheRangesItReads) {
  auto cluster = StartCluster();
  ASSERT_NE(cluster, nullptr);
  auto c = Connect(cluster.get());
  ASSERT_NE(c, nullptr);
  const std::string data = Pattern(64 << 20, 21);  // 4 objects of 16 MiB: 4 chunks each
  ASSERT_TRUE(WriteStriped(*c, "/big", data).ok());
  ASSERT_TRUE(c->HsmArchive("/big").ok());
  ASSERT_TRUE(c->HsmRelease("/big").ok());
  auto st = c->Stat("/big");
  ASSERT_TRUE(st.ok());
  ASSERT_TRUE(WaitObjectsGone(*cluster, *st));

  // File offset 577 * 64 KiB + 10 is stripe 1, object offset 9 MiB + 10: its chunk 2.
  const uint64_t at = 577 * (64 << 10) + 10;
  const uint64_t chunk_off = 8 << 20;
  std::promise<void> open_gate;
  std::shared_future<void> gate = open_gate.get_future().share();
  std::atomic<bool> gate_open{false};
  auto release_gate = [&] {
    if (!gate_open.exchange(true))
      open_gate.set_value();
  };
  std::atomic<int> held{0};
  ColdTier(*cluster)->TEST_SetGetHook([&, gate](std::string_view key, uint64_t offset) {
    if (key.ends_with(".crc") || (key.ends_with(".1") && offset == chunk_off))
      return;
    held.fetch_add(1);
    gate.wait();
  });
  struct Ungate {
    std::function<void()> f;
    ~Ungate() { f(); }
  } ungate{[&] {
    release_gate();
    ColdTier(*cluster)->TEST_SetGetHook(nullptr);
  }};

  auto read_at = [&](Client* cl) {
    return std::async(std::launch::async, [cl, at]() -> Result<std::string> {
      CIUIC_ASSIGN_OR_RETURN(auto f, cl->Open("/big", O_RDONLY, 0));
      std::string buf(100, '\0');
      CIUIC_ASSIGN_OR_RETURN(size_t n, f->Pread(buf.data(), buf.size(), at));
      buf.resize(n);
      return buf;
    });
  };
  auto first = read_at(c.get());
  ASSERT_EQ(first.wait_for(std::chrono::seconds(60)), std::future_status::ready);
  auto got = first.get();
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(*got, data.substr(at, 100));
  EXPECT_GT(held.load(), 0);  // the rest of the file was still on its way
  EXPECT_EQ(StateOf(*c, "/big"), HsmState::kReleased);

  auto c2 = Connect(cluster.get());
  ASSERT_NE(c2, nullptr);
  auto second = read_at(c2.get());
  ASSERT_EQ(second.wait_for(std::chrono::seconds(60)), std::future_status::ready);
  auto got2 = second.get();
  ASSERT_TRUE(got2.ok()) << got2.status().ToString();
  EXPECT_EQ(*got2, data.substr(at, 100));

  release_gate();
  EXPECT_EQ(WaitState(*c, "/big", HsmState::kArchived), HsmState::kArchived);
  auto all = c2->ReadFile("/big");
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  EXPECT_TRUE(*all == data);
  EXPECT_EQ(ObjectsOnOsts(*cluster, *st), 4);
}

// OSSes that stop in the middle of a restore by extents lose their fills: the reader that
// opened the file then finds an object missing and restores the whole file again, never
// reading holes, and every byte comes back. The copy in the cold tier was never bad: the file
// is never marked lost. With a short retry window the opener's waits for the restore's end
// give up while the OSSes are down; with a long one they reach the restarted OSSes, which
// no longer know the restore.
class HsmRestartTest : public ::testing::TestWithParam<bool> {};

TEST_P(HsmRestartTest, OssRestartsMidRestoreLoseNothing) {
  MiniClusterOptions mo;
  mo.hsm_fill_chunk = 1 << 20;  // 16 chunks per object
  auto started = MiniCluster::Start(mo);
  ASSERT_TRUE(started.ok()) << started.status().ToString();
  auto cluster = std::move(*started);
  auto c = Connect(cluster.get(), /*short_timeouts=*/GetParam());
  ASSERT_NE(c, nullptr);
  const std::string data = Pattern(64 << 20, 22);
  ASSERT_TRUE(WriteStriped(*c, "/big", data).ok());
  ASSERT_TRUE(c->HsmArchive("/big").ok());
  ASSERT_TRUE(c->HsmRelease("/big").ok());
  auto st = c->Stat("/big");
  ASSERT_TRUE(st.ok());
  ASSERT_TRUE(WaitObjectsGone(*cluster, *st));
  // A slow store: each OSS's 32 chunks take four rounds of its 8 fill threads, 4 s in all, so
  // the stops below come in the middle even on a loaded machine under ASan (300 ms a chunk was
  // not enough there). A stop waits for the fetches in flight: at most 1 s.
  std::atomic<bool> slow{true};
  ColdTier(*cluster)->TEST_SetGetHook([&slow](std::string_view key, uint64_t) {
    if (slow.load() && !key.ends_with(".crc"))
      std::this_thread::sleep_for(std::chrono::seconds(1));
  });
  auto f = c->Open("/big", O_RDONLY, 0);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  std::string head(100, '\0');
  auto n = (*f)->Pread(head.data(), head.size(), 0);
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(head, data.substr(0, 100));
  for (int i = 0; i < 2; ++i)
    ASSERT_TRUE(cluster->StopOss(i).ok());
  slow = false;
  ColdTier(*cluster)->TEST_SetGetHook(nullptr);
  for (int i = 0; i < 2; ++i)
    ASSERT_TRUE(cluster->RestartOss(i).ok());
  ASSERT_TRUE(cluster->WaitForOsts(4).ok());
  // The stop came in the middle: at most the first object of each OSS was whole by then.
  EXPECT_LT(ObjectsOnOsts(*cluster, *st), 4);
  EXPECT_NE(StateOf(*c, "/big"), HsmState::kLost);
  std::string all(data.size(), '\0');
  auto m = (*f)->Pread(all.data(), all.size(), 0);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(*m, data.size());
  EXPECT_TRUE(all == data);
  ASSERT_TRUE((*f)->Close().ok());
  EXPECT_EQ(WaitState(*c, "/big", HsmState::kArchived), HsmState::kArchived);
  auto again = c->ReadFile("/big");
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_TRUE(*again == data);
}

INSTANTIATE_TEST_SUITE_P(RetryWindows,
                         HsmRestartTest,
                         ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& i) {
                           return i.param ? "ShortRetry" : "LongRetry";
                         });

// The HSM protocol at its seams, driven by hand through a ClientCore, in an order no timing
// makes reliable: the restore's beginner records a failure (its waits lost an OSS that
// restarted) while a reader that joined it saw every object come back.
class HsmProtocolTest : public ::testing::Test {
 protected:
  void SetUp() override {
    cluster_ = StartCluster();
    ASSERT_NE(cluster_, nullptr);
    c_ = Connect(cluster_.get());
    ASSERT_NE(c_, nullptr);
    data_ = Pattern(1 << 20, 31);
    ASSERT_TRUE(WriteStriped(*c_, "/p", data_).ok());
    ASSERT_TRUE(c_->HsmArchive("/p").ok());
    ASSERT_TRUE(c_->HsmRelease("/p").ok());
    auto st = c_->Stat("/p");
    ASSERT_TRUE(st.ok());
    st_ = *st;
    ASSERT_TRUE(WaitObjectsGone(*cluster_, st_));
    ClientOptions o;
    o.cluster_file = cluster_->cluster_file();
    auto core = client::ClientCore::Create(o);
    ASSERT_TRUE(core.ok()) << core.status().ToString();
    core_ = std::move(*core);
  }
  void TearDown() override {
    if (core_)
      core_->Shutdown();
  }

  Fid fid() const { return Fid{st_.ino, st_.fid_mds, st_.fid_ver}; }

  Result<pb::HsmBeginResp> Begin() {
    pb::HsmBeginReq req;
    net::ToPb(fid(), req.mutable_fid());
    req.set_op(client::kHsmOpRestore);
    pb::HsmBeginResp resp;
    CIUIC_RETURN_IF_ERROR(core_->Mds(net::MsgType::kHsmBegin, &req, &resp, true));
    return resp;
  }

  Status End(uint64_t token, bool failed, uint64_t version) {
    pb::HsmEndReq req;
    net::ToPb(fid(), req.mutable_fid());
    req.set_op(client::kHsmOpRestore);
    req.set_token(token);
    req.set_failed(failed);
    req.set_version(version);
    pb::HsmEndResp resp;
    return core_->Mds(net::MsgType::kHsmEnd, &req, &resp, true);
  }

  // HsmObj `op` (7: start a restore, 9: wait for its end) on every object of `layout`.
  Status EveryObject(const pb::Layout& layout, uint32_t op, uint64_t version) {
    std::vector<std::shared_ptr<client::OstCall>> calls;
    for (const auto& comp : layout.components()) {
      for (int s = 0; s < comp.osts_size(); ++s) {
        auto call = std::make_shared<client::OstCall>();
        call->type = net::MsgType::kHsmObj;
        call->ost = comp.osts(s);
        auto req = std::make_unique<pb::HsmObjReq>();
        req->set_ost(comp.osts(s));
        net::ToPb(fid(), req->mutable_obj()->mutable_fid());
        req->mutable_obj()->set_comp(comp.id());
        req->mutable_obj()->set_stripe(static_cast<uint32_t>(s));
        req->set_op(op);
        req->set_version(version);
        call->req = std::move(req);
        calls.push_back(std::move(call));
      }
    }
    return core_->OstCallAll(std::move(calls));
  }

  std::unique_ptr<MiniCluster> cluster_;
  std::unique_ptr<Client> c_;
  std::shared_ptr<client::ClientCore> core_;
  std::string data_;
  FileStat st_;
};

TEST_F(HsmProtocolTest, AWaitNoOssKnowsIsAbortedNotACopyMissing) {
  auto begin = Begin();
  ASSERT_TRUE(begin.ok()) << begin.status().ToString();
  ASSERT_NE(begin->token(), 0u);
  // No restore started on any OSS (as after a restart): the copy may be fine, so not NotFound,
  // which would make the MDS mark the file lost.
  Status w = EveryObject(begin->layout(), 9, 0);
  EXPECT_EQ(w.code(), StatusCode::kAborted) << w.ToString();
  ASSERT_TRUE(End(begin->token(), /*failed=*/true, 0).ok());
  EXPECT_EQ(StateOf(*c_, "/p"), HsmState::kReleased);
  auto all = c_->ReadFile("/p");
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  EXPECT_TRUE(*all == data_);
}

// A reader that joins a restore in progress (here `ciuic hsm restore`, through the client) and
// meets an OSS that lost track of it between its start and its wait (a restart: kAborted)
// starts it again instead of failing. The restore it joins was begun by hand: no other wait
// reaches the fault point.
TEST_F(HsmProtocolTest, AJoinerWhoseOssLostTheRestoreStartsItAgain) {
  auto first = Begin();
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  ASSERT_NE(first->token(), 0u);
  // A slow store: the fills begun here still run when the client joins them.
  std::atomic<bool> slow{true};
  ColdTier(*cluster_)->TEST_SetGetHook([&slow](std::string_view key, uint64_t) {
    if (slow.load() && !key.ends_with(".crc"))
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
  });
  ASSERT_TRUE(EveryObject(first->layout(), 7, first->record().archived_version()).ok());
  Status r;
  int hits = 0;
  {
    ScopedFault lost("oss.hsm.restore_wait",
                     Status::Aborted("no restore of it is in progress here (test)"), 1);
    r = c_->HsmRestore("/p");  // joins: start, wait (aborted once), start again, wait
    hits = lost.hits();
  }
  slow = false;
  ColdTier(*cluster_)->TEST_SetGetHook(nullptr);
  EXPECT_TRUE(r.ok()) << r.ToString();
  EXPECT_EQ(hits, 1);
  EXPECT_EQ(StateOf(*c_, "/p"), HsmState::kArchived);
  auto all = c_->ReadFile("/p");
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  EXPECT_TRUE(*all == data_);
}

TEST_F(HsmProtocolTest, AJoinerThatSawEveryObjectEndsARestoreItsBeginnerFailed) {
  auto first = Begin();
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  ASSERT_NE(first->token(), 0u);
  auto joined = Begin();
  ASSERT_TRUE(joined.ok()) << joined.status().ToString();
  ASSERT_EQ(joined->token(), 0u);
  const uint64_t version = joined->record().archived_version();
  ASSERT_NE(version, 0u);
  ASSERT_TRUE(EveryObject(joined->layout(), 7, version).ok());
  ASSERT_TRUE(EveryObject(joined->layout(), 9, 0).ok());
  // The beginner's failure lands first.
  ASSERT_TRUE(End(first->token(), /*failed=*/true, 0).ok());
  EXPECT_EQ(StateOf(*c_, "/p"), HsmState::kReleased);
  // A joiner that names no version cannot say which copy came back: stale, as before.
  EXPECT_EQ(End(0, false, 0).code(), StatusCode::kStale);
  // Nor one that names another version.
  EXPECT_EQ(End(0, false, version + 1).code(), StatusCode::kStale);
  Status e = End(0, false, version);
  ASSERT_TRUE(e.ok()) << e.ToString();
  EXPECT_EQ(StateOf(*c_, "/p"), HsmState::kArchived);
  EXPECT_EQ(ObjectsOnOsts(*cluster_, st_), 4);
  auto all = c_->ReadFile("/p");
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  EXPECT_TRUE(*all == data_);
}

TEST(HsmTest, AWriteMakesItDirtyAndANewArchiveReplacesTheOldCopy) {
  auto cluster = StartCluster();
  ASSERT_NE(cluster, nullptr);
  auto c = Connect(cluster.get());
  ASSERT_TRUE(WriteStriped(*c, "/d", Pattern(300000, 2)).ok());
  ASSERT_TRUE(c->HsmArchive("/d").ok());
  const uint64_t v1 = c->HsmGetState("/d")->archived_version;
  {
    auto f = c->Open("/d", O_WRONLY, 0);
    ASSERT_TRUE(f.ok());
    ASSERT_TRUE((*f)->Pwrite("xyz", 3, 10).ok());
    ASSERT_TRUE((*f)->Close().ok());
  }
  auto s = c->HsmGetState("/d");
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->state, HsmState::kDirty);
  EXPECT_EQ(s->archived_version, v1);
  EXPECT_GT(s->data_version, v1);

  Status r = c->HsmRelease("/d");
  EXPECT_EQ(r.code(), StatusCode::kInvalidArgument) << r.ToString();
  EXPECT_NE(r.message().find("dirty"), std::string::npos) << r.ToString();
  EXPECT_NE(r.message().find("/d"), std::string::npos) << r.ToString();

  ASSERT_TRUE(c->HsmArchive("/d").ok());
  s = c->HsmGetState("/d");
  EXPECT_EQ(s->state, HsmState::kArchived);
  EXPECT_EQ(s->archived_version, s->data_version);
  // The old copy went once the MDS recorded the new one.
  EXPECT_EQ(DataKeys(*cluster, v1).size(), 0u);
  EXPECT_GT(DataKeys(*cluster, s->data_version).size(), 0u);
}

TEST(HsmTest, WriteToAReleasedFileRestoresItFirst) {
  auto cluster = StartCluster();
  ASSERT_NE(cluster, nullptr);
  auto c = Connect(cluster.get());
  std::string data = Pattern(700000, 3);
  ASSERT_TRUE(WriteStriped(*c, "/w", data).ok());
  ASSERT_TRUE(c->HsmArchive("/w").ok());
  ASSERT_TRUE(c->HsmRelease("/w").ok());
  {
    auto f = c->Open("/w", O_RDWR, 0);
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    ASSERT_TRUE((*f)->Pwrite("HELLO", 5, 200000).ok());
    ASSERT_TRUE((*f)->Close().ok());
  }
  data.replace(200000, 5, "HELLO");
  auto got = c->ReadFile("/w");
  ASSERT_TRUE(got.ok());
  EXPECT_TRUE(*got == data);
  EXPECT_EQ(StateOf(*c, "/w"), HsmState::kDirty);

  // O_TRUNC of a released file needs none of its bytes: it is emptied, not restored.
  ASSERT_TRUE(c->HsmArchive("/w").ok());
  ASSERT_TRUE(c->HsmRelease("/w").ok());
  ASSERT_TRUE(c->WriteFile("/w", "new", 0644).ok());
  EXPECT_EQ(*c->ReadFile("/w"), "new");
  EXPECT_EQ(StateOf(*c, "/w"), HsmState::kDirty);
  // Truncating a released file to a non-zero size would need its bytes: refused.
  ASSERT_TRUE(WriteStriped(*c, "/t", Pattern(100000, 4)).ok());
  ASSERT_TRUE(c->HsmArchive("/t").ok());
  ASSERT_TRUE(c->HsmRelease("/t").ok());
  Status t = c->Truncate("/t", 10);
  EXPECT_EQ(t.code(), StatusCode::kBusy) << t.ToString();
  EXPECT_EQ(c->ReadFile("/t")->size(), 100000u);
}

TEST(HsmTest, ACorruptArchivedObjectIsAnIoErrorNamingTheFile) {
  auto cluster = StartCluster();
  ASSERT_NE(cluster, nullptr);
  auto c = Connect(cluster.get());
  ASSERT_TRUE(c->Mkdir("/data").ok());
  ASSERT_TRUE(WriteStriped(*c, "/data/bad", Pattern(500000, 5)).ok());
  ASSERT_TRUE(c->HsmArchive("/data/bad").ok());
  ASSERT_TRUE(c->HsmRelease("/data/bad").ok());
  const uint64_t v = c->HsmGetState("/data/bad")->archived_version;
  auto keys = DataKeys(*cluster, v);
  ASSERT_EQ(keys.size(), 4u);
  auto store = ColdTier(*cluster);
  auto bytes = store->GetAll(keys[1]);
  ASSERT_TRUE(bytes.ok());
  (*bytes)[bytes->size() / 2] ^= 0x20;
  ASSERT_TRUE(store->Put(keys[1], *bytes).ok());

  auto got = c->ReadFile("/data/bad");
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), StatusCode::kIoError) << got.status().ToString();
  EXPECT_EQ(got.status().ToErrno(), EIO);
  EXPECT_NE(got.status().message().find("/data/bad"), std::string::npos) << got.status().ToString();
  EXPECT_NE(got.status().message().find("corrupt"), std::string::npos) << got.status().ToString();
  EXPECT_EQ(WaitState(*c, "/data/bad", HsmState::kLost), HsmState::kLost);
  // Still no wrong bytes on the next try.
  EXPECT_EQ(c->ReadFile("/data/bad").status().code(), StatusCode::kIoError);
}

TEST(HsmTest, AMissingArchivedObjectIsAClearError) {
  auto cluster = StartCluster();
  ASSERT_NE(cluster, nullptr);
  auto c = Connect(cluster.get());
  ASSERT_TRUE(WriteStriped(*c, "/gone", Pattern(400000, 6)).ok());
  ASSERT_TRUE(c->HsmArchive("/gone").ok());
  ASSERT_TRUE(c->HsmRelease("/gone").ok());
  auto keys = DataKeys(*cluster, c->HsmGetState("/gone")->archived_version);
  ASSERT_FALSE(keys.empty());
  ASSERT_TRUE(ColdTier(*cluster)->Delete(keys[0]).ok());
  Status st = c->HsmRestore("/gone");
  EXPECT_EQ(st.code(), StatusCode::kIoError) << st.ToString();
  EXPECT_NE(st.message().find("/gone"), std::string::npos) << st.ToString();
  EXPECT_NE(st.message().find("missing"), std::string::npos) << st.ToString();
  EXPECT_EQ(c->Open("/gone", O_RDONLY, 0).status().code(), StatusCode::kIoError);
  EXPECT_EQ(StateOf(*c, "/gone"), HsmState::kLost);
}

TEST(HsmTest, ReleaseAndRemoveAreRefusedWhenTheyWouldLoseData) {
  auto cluster = StartCluster();
  ASSERT_NE(cluster, nullptr);
  auto c = Connect(cluster.get());
  ASSERT_TRUE(WriteStriped(*c, "/r", Pattern(200000, 7)).ok());
  Status st = c->HsmRelease("/r");
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.ToString();
  EXPECT_NE(st.message().find("not archived"), std::string::npos) << st.ToString();
  ASSERT_TRUE(c->HsmArchive("/r").ok());
  {
    auto f = c->Open("/r", O_RDONLY, 0);
    ASSERT_TRUE(f.ok());
    EXPECT_EQ(c->HsmRelease("/r").code(), StatusCode::kBusy);
    ASSERT_TRUE((*f)->Close().ok());
  }
  ASSERT_TRUE(c->HsmRelease("/r").ok());
  st = c->HsmRemove("/r");
  EXPECT_EQ(st.code(), StatusCode::kBusy) << st.ToString();
  ASSERT_TRUE(c->HsmRestore("/r").ok());
  ASSERT_TRUE(c->HsmRemove("/r").ok());
  EXPECT_EQ(StateOf(*c, "/r"), HsmState::kNone);
  EXPECT_TRUE(ColdKeys(*cluster).empty());
  EXPECT_EQ(c->HsmRelease("/r").code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(c->ReadFile("/r").ok());

  ASSERT_TRUE(c->Mkdir("/dir").ok());
  EXPECT_EQ(c->HsmArchive("/dir").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(c->HsmArchive("/nope").code(), StatusCode::kNotFound);

  // A cold tier that fails mid-archive leaves the file unarchived.
  ColdTier(*cluster)->TEST_FailNext(1000, Status::IoError("injected store failure"));
  st = c->HsmArchive("/r");
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("/r"), std::string::npos) << st.ToString();
  ColdTier(*cluster)->TEST_FailNext(0, Status::OK());
  EXPECT_EQ(StateOf(*c, "/r"), HsmState::kNone);
  EXPECT_EQ(c->HsmRelease("/r").code(), StatusCode::kInvalidArgument);
}

// Client keys (capabilities on every OSS request): a tenant archives and releases its own file;
// a read-only key may read (so restore) a released file but not archive or release one.
TEST(HsmTest, ClientKeysUseCapabilitiesAndReadOnlyKeysOnlyRestore) {
  auto cluster = StartCluster();
  ASSERT_NE(cluster, nullptr);
  auto admin = Connect(cluster.get());
  ASSERT_TRUE(admin->Mkdir("/t", 0777).ok());
  pb::ClientKeyRecord rules;
  rules.set_name("tenant");
  auto file = cluster->AddClientKey(rules);
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  ClientOptions o;
  o.cluster_file = *file;
  o.uid = 1000;
  o.gid = 1000;
  auto tenant = cluster->NewClient(o);
  ASSERT_TRUE(tenant.ok()) << tenant.status().ToString();
  const std::string data = Pattern(250000, 11);
  ASSERT_TRUE(WriteStriped(**tenant, "/t/mine", data).ok());
  ASSERT_TRUE((*tenant)->HsmArchive("/t/mine").ok());
  ASSERT_TRUE((*tenant)->HsmRelease("/t/mine").ok());
  EXPECT_EQ(*(*tenant)->ReadFile("/t/mine"), data);
  ASSERT_TRUE((*tenant)->Chmod("/t/mine", 0644).ok());
  ASSERT_TRUE((*tenant)->HsmRelease("/t/mine").ok());

  pb::ClientKeyRecord ro;
  ro.set_name("reader");
  ro.set_read_only(true);
  auto ro_file = cluster->AddClientKey(ro);
  ASSERT_TRUE(ro_file.ok());
  o.cluster_file = *ro_file;
  o.uid = 2000;
  o.gid = 2000;
  auto reader = cluster->NewClient(o);
  ASSERT_TRUE(reader.ok());
  EXPECT_EQ((*reader)->HsmArchive("/t/mine").code(), StatusCode::kPermissionDenied);
  EXPECT_EQ((*reader)->HsmRelease("/t/mine").code(), StatusCode::kPermissionDenied);
  auto got = (*reader)->ReadFile("/t/mine");
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_TRUE(*got == data);
  EXPECT_EQ(WaitState(**reader, "/t/mine", HsmState::kArchived), HsmState::kArchived);
}

// Power cuts at varying points of archive + release, of the whole cluster, of the MDS alone and
// of one OSS alone: a file is never released without a complete copy, and its bytes always read
// back. (Each round prints where its cut left the file.)
TEST(HsmTest, PowerCutsMidArchiveOrReleaseNeverLoseData) {
  auto cluster = StartCluster(/*power_loss=*/true);
  ASSERT_NE(cluster, nullptr);
  const std::string data = Pattern(3 << 20, 8);
  for (int round = 0; round < 12; ++round) {
    SCOPED_TRACE(round);
    const std::string path = "/p" + std::to_string(round);
    const int delay_ms = 2 + 6 * (round / 3) + 3 * (round % 3);
    {
      auto c = Connect(cluster.get(), true);
      ASSERT_TRUE(WriteStriped(*c, path, data).ok());
      ASSERT_TRUE(c->FsyncDir("/").ok());
      std::thread worker([&] {
        Status a = c->HsmArchive(path);
        if (a.ok())
          c->HsmRelease(path).IgnoreError();  // may be cut short: checked below
      });
      std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
      if (round % 3 == 0) {
        ASSERT_TRUE(cluster->PowerCycle().ok());
      } else if (round % 3 == 1) {
        ASSERT_TRUE(cluster->PowerCycleMds().ok());
      } else {
        ASSERT_TRUE(cluster->PowerCycleOss(round % 2).ok());
      }
      worker.join();
    }
    auto c = Connect(cluster.get());
    auto s = c->HsmGetState(path);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    std::printf("round %d: cut (%s) after %d ms left the file %s\n", round,
                round % 3 == 0   ? "cluster"
                : round % 3 == 1 ? "MDS"
                                 : "one OSS",
                delay_ms, HsmStateName(s->state));
    if (s->state == HsmState::kNone) {
      EXPECT_EQ(c->HsmRelease(path).code(), StatusCode::kInvalidArgument);
    } else if (s->state == HsmState::kArchived) {
      ASSERT_TRUE(c->HsmRelease(path).ok());
    } else {
      EXPECT_EQ(s->state, HsmState::kReleased);
    }
    auto got = c->ReadFile(path);
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    EXPECT_TRUE(*got == data);
  }
}

// Statfs with tiers counts the cold tier from the MDS's records: archived, released and dirty.
TEST(HsmTest, StatfsTiersCountsTheColdTier) {
  auto cluster = StartCluster();
  ASSERT_NE(cluster, nullptr);
  auto c = Connect(cluster.get());
  ASSERT_NE(c, nullptr);
  ASSERT_TRUE(WriteStriped(*c, "/a", Pattern(300000, 1)).ok());
  ASSERT_TRUE(WriteStriped(*c, "/b", Pattern(5000, 2)).ok());
  ASSERT_TRUE(WriteStriped(*c, "/n", Pattern(7000, 3)).ok());
  auto none = c->StatfsTiers();
  ASSERT_TRUE(none.ok()) << none.status().ToString();
  EXPECT_EQ(none->cold_files, 0u);
  EXPECT_EQ(none->cold_bytes, 0u);
  ASSERT_TRUE(c->HsmArchive("/a").ok());
  ASSERT_TRUE(c->HsmArchive("/b").ok());
  ASSERT_TRUE(c->HsmRelease("/a").ok());
  ASSERT_TRUE(WriteStriped(*c, "/b", Pattern(9000, 4)).ok());  // dirty; its copy keeps 5000
  auto t = c->StatfsTiers();
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->cold_files, 2u);
  EXPECT_EQ(t->cold_bytes, 305000u);
  EXPECT_EQ(t->released_files, 1u);
  EXPECT_EQ(t->released_bytes, 300000u);
  EXPECT_EQ(t->dirty_files, 1u);
  // The plain Statfs (a mount's) does not scan.
  auto plain = c->Statfs();
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->cold_files, 0u);
}

}  // namespace
}  // namespace ciuic::testing
