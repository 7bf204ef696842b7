// Writes the seed corpus of the fuzz targets: small valid inputs, encoded by the real encoders
// (frames, handshake messages, MDS and OSS requests, tar files and their index, manifests,
// cluster files, shared-memory registrations). Usage: fuzz_seeds DIR (DIR/<target>/seed-*).
// The names are stable, so running it again rewrites the same files.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "checkpoint/manifest.h"
#include "ciuic.pb.h"
#include "loader/tar_index.h"
#include "net/frame.h"
#include "net/msg_types.h"
#include "net/shm.h"

namespace ciuic::fuzz {
namespace {

std::filesystem::path g_root;

void Put(const std::string& target, const std::string& name, const std::string& bytes) {
  const auto dir = g_root / target;
  std::filesystem::create_directories(dir);
  std::ofstream(dir / ("seed-" + name), std::ios::binary | std::ios::trunc) << bytes;
}

std::string Frame(net::MsgType type, uint16_t flags, const std::string& body, uint32_t data_len) {
  net::FrameHeader h;
  h.type = static_cast<uint16_t>(type);
  h.flags = flags;
  h.request_id = 1;
  h.data_len = data_len;
  uint8_t header[net::kFrameHeaderSize];
  net::EncodeFrameHeader(h, body, header);
  return std::string(reinterpret_cast<char*>(header), sizeof(header)) + body;
}

std::string U16(size_t v) {
  return std::string{static_cast<char>(v & 0xff), static_cast<char>((v >> 8) & 0xff)};
}

// One request of the mds / oss targets: type index, who, body, and (oss) the data segment.
std::string Req(uint8_t type_index,
                uint8_t who,
                const google::protobuf::MessageLite& body,
                const std::string* data = nullptr) {
  const std::string b = body.SerializeAsString();
  std::string r{static_cast<char>(type_index), static_cast<char>(who)};
  r += U16(b.size()) + b;
  if (data != nullptr)
    r += U16(data->size()) + *data;
  return r;
}

void SetRoot(pb::Fid* f) {
  f->set_seq(1);
}

void Frames() {
  pb::ErrorInfo e;
  e.set_code(2);
  e.set_message("exists");
  Put("frame", "ping", Frame(net::MsgType::kPing, 0, "", 0));
  Put("frame", "error-reply",
      Frame(net::MsgType::kCreate, net::kFlagResponse | net::kFlagError, e.SerializeAsString(), 0));
  Put("frame", "write-with-data", Frame(net::MsgType::kWrite, 0, "body", 8) + "datadata");
  Put("frame", "two-frames",
      Frame(net::MsgType::kGetAttr, 0, "x", 0) + Frame(net::MsgType::kGetAttr, 1, "yz", 0));
}

void Handshakes() {
  for (uint32_t key : {1u, 100u, 107u, 5u}) {
    for (uint32_t role : {1u, 2u, 3u}) {
      pb::Hello hello;
      hello.set_min_version(1);
      hello.set_max_version(key == 5 ? 7 : 1);
      hello.set_role(role);
      hello.set_key_id(key);
      hello.set_nonce(std::string(32, 'c'));
      pb::Proof proof;
      proof.set_mac(std::string(32, 'm'));
      const std::string stream = Frame(net::MsgType::kHello, 0, hello.SerializeAsString(), 0) +
                                 Frame(net::MsgType::kProof, 0, proof.SerializeAsString(), 0);
      // Mode 2: the harness puts the right MAC in the Proof; mode 0: as sent.
      Put("handshake", "key" + std::to_string(key) + "-role" + std::to_string(role),
          std::string(1, '\2') + stream);
      if (key == 1 && role == 1)
        Put("handshake", "wrong-mac", std::string(1, '\0') + stream);
    }
  }
}

void Mds() {
  // Type indexes as in mds_fuzz.cc's kTypes.
  constexpr uint8_t kOpenSession = 0, kLookup = 3, kResolvePath = 4, kGetAttr = 5, kCreate = 7,
                    kMkdir = 8, kUnlink = 9, kRename = 10, kSymlink = 11, kReadDir = 14, kOpen = 15,
                    kStatfs = 21, kSetXattr = 23, kListClients = 31, kRegisterOss = 32,
                    kGetOstMap = 34;
  constexpr uint8_t kAdmin = 3, kOssRole = 2, kClientKey = 4;
  pb::OpenSessionReq open;
  open.set_client_name("seed");
  pb::MkdirReq mkdir;
  mkdir.mutable_ctx()->set_session_id(1);
  SetRoot(mkdir.mutable_parent());
  mkdir.set_name("d");
  mkdir.set_mode(0755);
  pb::CreateReq create;
  create.mutable_ctx()->set_session_id(1);
  SetRoot(create.mutable_parent());
  create.set_name("f");
  create.set_mode(0100644);
  create.set_open(true);
  pb::LookupReq lookup;
  SetRoot(lookup.mutable_parent());
  lookup.set_name("f");
  pb::ResolvePathReq resolve;
  resolve.set_path("/d/../f");
  resolve.set_follow_last(true);
  pb::GetAttrReq getattr;
  SetRoot(getattr.mutable_fid());
  pb::ReadDirReq readdir;
  SetRoot(readdir.mutable_dir());
  readdir.set_plus(true);
  readdir.set_max_entries(10);
  pb::RenameReq rename;
  SetRoot(rename.mutable_src_parent());
  rename.set_src_name("f");
  SetRoot(rename.mutable_dst_parent());
  rename.set_dst_name("g");
  pb::SymlinkReq symlink;
  SetRoot(symlink.mutable_parent());
  symlink.set_name("l");
  symlink.set_target("/d");
  pb::UnlinkReq unlink;
  SetRoot(unlink.mutable_parent());
  unlink.set_name("d");
  unlink.set_dir(true);
  pb::StatfsReq statfs;
  pb::GetOstMapReq ostmap;
  pb::RegisterOssReq reg;
  reg.set_oss_addr("127.0.0.1:7000");
  reg.set_cluster_uuid("fuzz-cluster");
  reg.add_osts()->set_index(0);
  pb::ListClientsReq list;
  Put("mds", "namespace",
      Req(kOpenSession, 1, open) + Req(kMkdir, kAdmin, mkdir) + Req(kCreate, kAdmin, create) +
          Req(kLookup, kAdmin, lookup) + Req(kResolvePath, kAdmin, resolve) +
          Req(kGetAttr, kAdmin, getattr) + Req(kReadDir, kAdmin, readdir) +
          Req(kRename, kAdmin, rename) + Req(kSymlink, kAdmin, symlink) +
          Req(kUnlink, kAdmin, unlink));
  Put("mds", "client-key",
      Req(kOpenSession, kClientKey, open) + Req(kMkdir, kClientKey, mkdir) +
          Req(kCreate, kClientKey, create) + Req(kStatfs, kClientKey, statfs));
  Put("mds", "oss", Req(kRegisterOss, kOssRole, reg) + Req(kGetOstMap, 1, ostmap));
  Put("mds", "admin", Req(kListClients, kAdmin, list) + Req(kListClients, 1, list));
  pb::SetXattrReq setx;
  SetRoot(setx.mutable_fid());
  setx.set_name("user.a");
  setx.set_value("v");
  pb::OpenReq openreq;
  SetRoot(openreq.mutable_fid());
  Put("mds", "xattr-open", Req(kSetXattr, kAdmin, setx) + Req(kOpen, kAdmin, openreq));
}

void Oss() {
  // Type indexes as in oss_fuzz.cc's kTypes.
  constexpr uint8_t kWrite = 0, kRead = 1, kSync = 2, kPunch = 3, kDestroy = 4, kObjStat = 5,
                    kStatfs = 6;
  constexpr uint8_t kAdmin = 3;
  pb::ObjectId obj;
  obj.mutable_fid()->set_seq(42);
  pb::WriteReq w;
  w.set_ost(0);
  *w.mutable_obj() = obj;
  w.set_offset(4000);
  const std::string data(300, 'x');
  pb::ReadReq r;
  r.set_ost(0);
  *r.mutable_obj() = obj;
  r.set_offset(4090);
  r.set_length(200);
  pb::SyncReq s;
  s.set_ost(0);
  *s.add_objs() = obj;
  pb::PunchReq p;
  p.set_ost(0);
  *p.mutable_obj() = obj;
  p.set_length(4096);
  pb::ObjStatReq st;
  st.set_ost(0);
  *st.mutable_obj() = obj;
  pb::DestroyReq d;
  d.set_ost(0);
  *d.mutable_obj() = obj;
  pb::OstStatfsReq f;
  f.set_ost(3);
  const std::string none;
  Put("oss", "object-life",
      Req(kWrite, kAdmin, w, &data) + Req(kRead, kAdmin, r, &none) + Req(kSync, kAdmin, s, &none) +
          Req(kPunch, kAdmin, p, &none) + Req(kObjStat, kAdmin, st, &none) +
          Req(kDestroy, kAdmin, d, &none) + Req(kStatfs, kAdmin, f, &none));
  Put("oss", "client-key-no-cap", Req(kWrite, 4, w, &data) + Req(kRead, 4, r, &none));
}

void Tars() {
  loader::TarWriter w;
  w.Add("a.txt", "hello").IgnoreError();
  w.Add(std::string(150, 'n') + ".bin", std::string(700, 'z')).IgnoreError();  // pax name
  w.Add("dir/b", "").IgnoreError();
  Put("tar_index", "tar", w.Finish());
  w.Add("only", "x").IgnoreError();
  const auto members = w.members();
  w.Finish();
  Put("tar_index", "index", loader::FormatIndex(members));
}

void Manifests() {
  checkpoint::Manifest m;
  m.save_id = "0123456789abcdef";
  m.world_size = 2;
  m.chunk_bytes = 4096;
  m.extra_json = R"({"tree": {"a": [1, 2]}})";
  checkpoint::TensorInfo t;
  t.name = "w";
  t.dtype = "float32";
  t.stored_dtype = "bfloat16";
  t.shape = {4, 3};
  for (int r = 0; r < 2; ++r) {
    checkpoint::ShardInfo s;
    s.file = checkpoint::DataFileName(m.save_id, r);
    s.offset = 0;
    s.length = 2 * 3 * 2;
    s.shape = {2, 3};
    s.offsets = {2 * r, 0};
    s.crc32c = {123};
    t.shards.push_back(s);
  }
  m.tensors.push_back(t);
  checkpoint::TensorInfo scalar;
  scalar.name = "step";
  scalar.dtype = scalar.stored_dtype = "int64";
  m.tensors.push_back(scalar);
  Put("manifest", "manifest", checkpoint::EncodeManifest(m));
  Put("manifest", "part", checkpoint::EncodeManifest(m, 1));
}

void ClusterFiles() {
  Put("cluster_file", "admin",
      "# ciuic cluster file\ncluster_uuid = 5d1c2b7e-0000-4000-8000-000000000000\n"
      "mds = 127.0.0.1:7100\nkey_id = 1\nsecret = " +
          std::string(64, 'a') + "\n");
  Put("cluster_file", "client",
      "mds = localhost:1\r\nkey_id = 100\r\nsecret = 00112233445566778899aabbccddeeff\r\n"
      "unknown = kept\n");
}

void ShmRegistrations() {
  net::ShmRegisterMsg msg{};
  std::memcpy(msg.magic, net::kShmMagic, sizeof(msg.magic));
  msg.version = net::kShmVersion;
  const std::string m(reinterpret_cast<const char*>(&msg), sizeof(msg));
  // First byte: descriptors (1: one sealed memfd) and size in pages (bits 3-4); second: recv
  // flags.
  Put("shm_register", "one-page", std::string{'\x09', '\0'} + m);
  Put("shm_register", "unsealed", std::string{'\x0b', '\0'} + m);
  Put("shm_register", "no-fd", std::string{'\0', '\0'} + m);
}

}  // namespace
}  // namespace ciuic::fuzz

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: fuzz_seeds DIR\n");
    return 2;
  }
  ciuic::fuzz::g_root = argv[1];
  ciuic::fuzz::Frames();
  ciuic::fuzz::Handshakes();
  ciuic::fuzz::Mds();
  ciuic::fuzz::Oss();
  ciuic::fuzz::Tars();
  ciuic::fuzz::Manifests();
  ciuic::fuzz::ClusterFiles();
  ciuic::fuzz::ShmRegistrations();
  return 0;
}
