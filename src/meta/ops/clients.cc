// Tenants (ARCHITECTURE Decision 13): the table of client keys (AddClient, RevokeClient,
// ListClients) and the subtree check of FIDs named by a subtree key's requests.
#include <fmt/format.h>
#include <google/protobuf/descriptor.h>
#include <google/protobuf/message.h>

#include "meta/meta_service.h"
#include "meta/ops/op_util.h"
#include "net/capability.h"

namespace ciuic::meta {
namespace {

constexpr int kMaxDepth = 4096;

Status ValidateClientName(std::string_view name) {
  if (name.empty() || name.size() > 64)
    return Status::InvalidArgument("client name must be 1 to 64 characters");
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '-' || c == '_' || c == '.';
    if (!ok) {
      return Status::InvalidArgument(
          fmt::format("client name '{}' may only hold letters, digits, '-', '_' and '.'", name));
    }
  }
  return Status::OK();
}

// OK when `fid` is `root` or below it; walks the parents stored in inode records (directories
// and, since tenants exist, files and symlinks: their first name's directory).
Status InSubtree(Reader& r, Fid fid, const Fid& root) {
  const Fid asked = fid;
  for (int depth = 0; depth < kMaxDepth; ++depth) {
    if (fid == root)
      return Status::OK();
    if (fid == kRootFid)
      break;
    pb::InodeRecord rec;
    CIUIC_RETURN_IF_ERROR(GetInode(r, fid, &rec));
    if (!rec.has_parent() || rec.parent().seq() == 0)
      break;  // a file created before parents were recorded: fail closed
    const Fid up = ToFid(rec.parent());
    if (up == fid)
      break;
    fid = up;
  }
  return Status::PermissionDenied(
      fmt::format("{} is outside the client's subtree", asked.ToString()));
}

}  // namespace

Status MetaService::LoadClientKeys() {
  KvReader r(kv_.get());
  Status parse;
  std::lock_guard lock(keys_mu_);
  CIUIC_RETURN_IF_ERROR(r.Scan(Cf::kSystem, kClientKeyPrefix,
                               PrefixEnd(std::string(kClientKeyPrefix)),
                               [&](std::string_view, std::string_view v) {
                                 auto rec = std::make_shared<pb::ClientKeyRecord>();
                                 if (!rec->ParseFromArray(v.data(), static_cast<int>(v.size()))) {
                                   parse = Status::Corruption("bad client key record");
                                   return false;
                                 }
                                 client_keys_[rec->key_id()] = std::move(rec);
                                 return true;
                               }));
  return parse;
}

std::shared_ptr<const pb::ClientKeyRecord> MetaService::FindClientKey(uint32_t key_id) const {
  std::lock_guard lock(keys_mu_);
  auto it = client_keys_.find(key_id);
  return it == client_keys_.end() ? nullptr : it->second;
}

std::vector<uint32_t> MetaService::RevokedKeyIds() const {
  std::lock_guard lock(keys_mu_);
  std::vector<uint32_t> out;
  for (const auto& [id, rec] : client_keys_) {
    if (rec->revoked())
      out.push_back(id);
  }
  return out;
}

Result<pb::ListClientsResp> MetaService::ListClients(const pb::ListClientsReq&) {
  std::map<uint32_t, std::shared_ptr<const pb::ClientKeyRecord>> sorted;
  {
    std::lock_guard lock(keys_mu_);
    sorted.insert(client_keys_.begin(), client_keys_.end());
  }
  pb::ListClientsResp resp;
  for (const auto& [id, rec] : sorted)
    *resp.add_clients() = *rec;
  return resp;
}

Status MetaService::Apply(Txn& t, const pb::AddClientReq& req, pb::AddClientResp* resp) {
  if (options_.admin_secret.empty())
    return Status::InvalidArgument("this MDS has no admin key: it cannot make client keys");
  pb::ClientKeyRecord rec = req.rules();
  CIUIC_RETURN_IF_ERROR(ValidateClientName(rec.name()));
  {
    std::lock_guard lock(keys_mu_);
    for (const auto& [id, other] : client_keys_) {
      if (!other->revoked() && other->name() == rec.name()) {
        return Status::AlreadyExists(
            fmt::format("client '{}' exists (key {}); revoke it first", rec.name(), id));
      }
    }
  }
  rec.clear_root();
  if (!rec.root_path().empty()) {
    if (rec.root_path()[0] != '/')
      return Status::InvalidArgument(
          fmt::format("subtree '{}' must be an absolute path", rec.root_path()));
    pb::InodeRecord dir;
    Fid parent;
    const pb::ReqCtx admin;  // uid 0 from the real root
    CIUIC_RETURN_IF_ERROR(Resolve(t, admin, rec.root_path(), true, &dir, &parent)
                              .WithContext(fmt::format("subtree {}", rec.root_path())));
    if (!IsDir(dir))
      return Status::NotADirectory(fmt::format("subtree {} is not a directory", rec.root_path()));
    if (ToFid(dir.attr().fid()) != kRootFid)
      *rec.mutable_root() = dir.attr().fid();
  }
  const uint64_t id = Allocate(t, &client_key_seq_);
  if (id > UINT32_MAX)
    return Status::NoSpace("client key ids are exhausted");
  rec.set_key_id(static_cast<uint32_t>(id));
  rec.set_revoked(false);
  rec.set_created_ms(WallMs());
  t.Put(Cf::kSystem, ClientKeyKey(rec.key_id()), rec.SerializeAsString());
  auto shared = std::make_shared<const pb::ClientKeyRecord>(rec);
  t.OnCommit([this, shared] {
    std::lock_guard lock(keys_mu_);
    client_keys_[shared->key_id()] = shared;
  });
  *resp->mutable_record() = rec;
  resp->set_key(net::DeriveClientKey(options_.admin_secret, rec.key_id()));
  return Status::OK();
}

Status MetaService::Apply(Txn& t, const pb::RevokeClientReq& req, pb::RevokeClientResp* resp) {
  std::shared_ptr<const pb::ClientKeyRecord> found;
  {
    std::lock_guard lock(keys_mu_);
    for (const auto& [id, rec] : client_keys_) {
      if (!rec->revoked() && rec->name() == req.name())
        found = rec;
    }
  }
  if (found == nullptr)
    return Status::NotFound(fmt::format("no client '{}' with a live key", req.name()));
  auto rec = std::make_shared<pb::ClientKeyRecord>(*found);
  rec->set_revoked(true);
  t.Put(Cf::kSystem, ClientKeyKey(rec->key_id()), rec->SerializeAsString());
  t.OnCommit([this, rec] {
    std::lock_guard lock(keys_mu_);
    client_keys_[rec->key_id()] = rec;
  });
  *resp->mutable_record() = *rec;
  return Status::OK();
}

Status MetaService::CheckReach(Reader& r, const google::protobuf::Message& req) {
  const google::protobuf::Descriptor* d = req.GetDescriptor();
  const google::protobuf::Reflection* refl = req.GetReflection();
  const google::protobuf::FieldDescriptor* ctx_field = d->FindFieldByName("ctx");
  if (ctx_field == nullptr || ctx_field->message_type() != pb::ReqCtx::descriptor() ||
      !refl->HasField(req, ctx_field)) {
    return Status::OK();
  }
  const auto& ctx = static_cast<const pb::ReqCtx&>(refl->GetMessage(req, ctx_field));
  if (!ctx.has_root() || ctx.root().seq() == 0)
    return Status::OK();
  const Fid root = ToFid(ctx.root());
  if (root == kRootFid)
    return Status::OK();
  for (int i = 0; i < d->field_count(); ++i) {
    const google::protobuf::FieldDescriptor* f = d->field(i);
    if (f->is_repeated() || f->message_type() != pb::Fid::descriptor() || !refl->HasField(req, f))
      continue;
    const auto& fid = static_cast<const pb::Fid&>(refl->GetMessage(req, f));
    CIUIC_RETURN_IF_ERROR(InSubtree(r, ToFid(fid), root));
  }
  return Status::OK();
}

Status MetaService::CheckReach(const google::protobuf::Message& req) {
  KvReader r(kv_.get());
  return CheckReach(r, req);
}

Result<uint32_t> MetaService::SessionKeyId(uint64_t session_id) {
  std::lock_guard lock(sess_mu_);
  auto it = sessions_.find(session_id);
  if (it == sessions_.end()) {
    return Status::Stale(
        fmt::format("session {} is unknown or expired; open a new one", session_id));
  }
  return it->second.key_id;
}

}  // namespace ciuic::meta
