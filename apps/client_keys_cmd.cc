#include "client_keys_cmd.h"

#include <charconv>
#include <cstdio>
#include <filesystem>

#include <fmt/format.h>

#include "ciuic.pb.h"
#include "common/config.h"
#include "net/msg_types.h"
#include "net/rpc.h"

namespace ciuic::cli {
namespace {

namespace fs = std::filesystem;

constexpr uint32_t kNobody = 65534;

int Fail(const std::string& msg) {
  std::fprintf(stderr, "ciuic: %s\n", msg.c_str());
  return 1;
}

Result<uint32_t> ParseId(std::string_view s) {
  uint32_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size() || s.empty())
    return Status::InvalidArgument(fmt::format("'{}' is not a uid", s));
  return v;
}

// Parses "1000:5000,*:65534" into the record.
Status ParseUidMap(const std::string& spec, pb::ClientKeyRecord* rec) {
  size_t i = 0;
  while (i < spec.size()) {
    size_t j = spec.find(',', i);
    if (j == std::string::npos)
      j = spec.size();
    std::string_view e(spec.data() + i, j - i);
    const size_t colon = e.find(':');
    if (colon == std::string_view::npos) {
      return Status::InvalidArgument(
          fmt::format("--uid-map entry '{}' is not CLIENT:SERVER (or *:SERVER)", e));
    }
    CIUIC_ASSIGN_OR_RETURN(uint32_t to, ParseId(e.substr(colon + 1)));
    if (e.substr(0, colon) == "*") {
      rec->set_map_others(true);
      rec->set_others_uid(to);
    } else {
      CIUIC_ASSIGN_OR_RETURN(uint32_t from, ParseId(e.substr(0, colon)));
      auto* m = rec->add_uid_map();
      m->set_from(from);
      m->set_to(to);
    }
    i = j + 1;
  }
  return Status::OK();
}

// Runs one admin request on the MDS named by the admin cluster file.
Status AdminCall(const ClusterFile& cf,
                 net::MsgType type,
                 const google::protobuf::MessageLite& req,
                 google::protobuf::MessageLite* resp) {
  net::EventLoop loop(1);
  net::ChannelOptions co;
  co.secret = cf.SecretBytes();
  co.key_id = cf.key_id;
  co.role = net::Role::kAdmin;
  auto ch = net::RpcChannel::Connect(&loop, cf.mds, co);
  if (!ch.ok()) {
    if (ch.status().code() == StatusCode::kPermissionDenied) {
      return Status::PermissionDenied(
          "the MDS refused this cluster file's key: client keys are managed with the admin "
          "cluster file (the one `ciuic cluster up` wrote)");
    }
    return ch.status().WithContext(fmt::format("cannot reach the MDS at {}", cf.mds.ToString()));
  }
  Status st = (*ch)->CallMsg(type, req, resp);
  (*ch)->Close();
  loop.Stop();
  return st;
}

Result<std::pair<std::string, ClusterFile>> LoadAdmin(const std::string& cluster_file) {
  CIUIC_ASSIGN_OR_RETURN(std::string path, FindClusterFile(cluster_file));
  CIUIC_ASSIGN_OR_RETURN(ClusterFile cf, ClusterFile::Load(path));
  return std::make_pair(path, cf);
}

std::string Describe(const pb::ClientKeyRecord& r) {
  std::string rules;
  for (const auto& m : r.uid_map())
    rules += fmt::format("{}uid {}->{}", rules.empty() ? "" : ", ", m.from(), m.to());
  if (r.map_others())
    rules += fmt::format("{}other uids->{}", rules.empty() ? "" : ", ", r.others_uid());
  if (r.squash_root())
    rules += fmt::format("{}root squashed to {}", rules.empty() ? "" : ", ", r.squash_uid());
  if (r.read_only())
    rules += fmt::format("{}read-only", rules.empty() ? "" : ", ");
  if (!r.root_path().empty())
    rules += fmt::format("{}subtree {}", rules.empty() ? "" : ", ", r.root_path());
  return fmt::format("{:<20} key {:<6} {:<8} {}", r.name(), r.key_id(),
                     r.revoked() ? "revoked" : "live", rules.empty() ? "(no rules)" : rules);
}

}  // namespace

int AddClient(const std::string& cluster_file, const AddClientOptions& o) {
  auto admin = LoadAdmin(cluster_file);
  if (!admin.ok())
    return Fail(admin.status().message());
  pb::AddClientReq req;
  pb::ClientKeyRecord* rec = req.mutable_rules();
  rec->set_name(o.name);
  if (Status s = ParseUidMap(o.uid_map, rec); !s.ok())
    return Fail(s.message());
  rec->set_squash_root(o.squash_root);
  rec->set_squash_uid(kNobody);
  rec->set_squash_gid(kNobody);
  rec->set_read_only(o.read_only);
  if (!o.subtree.empty() && o.subtree[0] != '/')
    return Fail(fmt::format("--subtree '{}' must be an absolute cluster path", o.subtree));
  rec->set_root_path(o.subtree);
  pb::AddClientResp resp;
  if (Status s = AdminCall(admin->second, net::MsgType::kAddClient, req, &resp); !s.ok())
    return Fail(fmt::format("add-client {}: {}", o.name, s.message()));
  std::string out = o.out;
  if (out.empty())
    out = (fs::path(admin->first).parent_path() / "clients" / (o.name + ".conf")).string();
  std::error_code ec;
  fs::create_directories(fs::path(out).parent_path(), ec);
  if (!ec)
    fs::permissions(fs::path(out).parent_path(), fs::perms::owner_all, ec);
  ClusterFile cf = admin->second;
  cf.key_id = resp.record().key_id();
  cf.secret_hex = HexEncode(resp.key());
  if (Status s = cf.Save(out); !s.ok()) {
    return Fail(
        fmt::format("client key {} was made but its cluster file could not be written "
                    "({}); revoke it with `ciuic cluster revoke-client {}`",
                    cf.key_id, s.message(), o.name));
  }
  std::printf("%s\ncluster file: %s\n", Describe(resp.record()).c_str(), out.c_str());
  return 0;
}

int RevokeClient(const std::string& cluster_file, const std::string& name) {
  auto admin = LoadAdmin(cluster_file);
  if (!admin.ok())
    return Fail(admin.status().message());
  pb::RevokeClientReq req;
  req.set_name(name);
  pb::RevokeClientResp resp;
  if (Status s = AdminCall(admin->second, net::MsgType::kRevokeClient, req, &resp); !s.ok())
    return Fail(fmt::format("revoke-client {}: {}", name, s.message()));
  std::printf("%s\n", Describe(resp.record()).c_str());
  return 0;
}

int ListClients(const std::string& cluster_file) {
  auto admin = LoadAdmin(cluster_file);
  if (!admin.ok())
    return Fail(admin.status().message());
  pb::ListClientsReq req;
  pb::ListClientsResp resp;
  if (Status s = AdminCall(admin->second, net::MsgType::kListClients, req, &resp); !s.ok())
    return Fail(fmt::format("list-clients: {}", s.message()));
  for (const auto& r : resp.clients())
    std::printf("%s\n", Describe(r).c_str());
  return 0;
}

}  // namespace ciuic::cli
