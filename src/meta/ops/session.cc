// Sessions and open-file state (Decision 6): OpenSession, CloseSession and the open records
// that keep unlinked-but-open files alive as orphans.
#include <fcntl.h>

#include <fmt/format.h>

#include "meta/meta_service.h"
#include "meta/ops/op_util.h"

namespace ciuic::meta {

Status MetaService::Apply(Txn& t, const pb::OpenSessionReq& req, pb::OpenSessionResp* resp) {
  if (req.client_name().size() > 256) {
    return Status::InvalidArgument("client name longer than 256 bytes");
  }
  const uint32_t key_id = req.ctx().key_id();
  {
    // Counted now (and given back if this mutation fails), so one group commit cannot
    // overshoot the cap.
    std::lock_guard lock(sess_mu_);
    size_t& n = sessions_per_key_[key_id];
    if (n >= options_.max_sessions_per_key) {
      return Status::NoSpace(fmt::format("too many sessions of client key {} (cap {})", key_id,
                                         options_.max_sessions_per_key));
    }
    ++n;
  }
  t.OnAbort([this, key_id] {
    std::lock_guard lock(sess_mu_);
    if (--sessions_per_key_[key_id] == 0)
      sessions_per_key_.erase(key_id);
  });
  const uint64_t sid = Allocate(t, &session_seq_);
  pb::SessionRecord rec;
  rec.set_session_id(sid);
  rec.set_client_name(req.client_name());
  rec.set_key_id(req.ctx().key_id());
  rec.set_expires_ms(WallMs() + options_.lease_ms);  // informational; leases live in memory
  t.Put(Cf::kSessions, SessionKey(sid), rec.SerializeAsString());
  t.OnCommit([this, sid, name = req.client_name(), key_id = req.ctx().key_id()] {
    std::lock_guard lock(sess_mu_);
    SessionState& s = sessions_[sid];
    s.client_name = name;
    s.key_id = key_id;
    s.expires_ms = NowMs() + options_.lease_ms;
  });
  resp->set_session_id(sid);
  resp->set_lease_ms(options_.lease_ms);
  // A subtree key's "/" is its subtree's directory.
  if (req.ctx().has_root() && req.ctx().root().seq() != 0) {
    *resp->mutable_root() = req.ctx().root();
  } else {
    net::ToPb(kRootFid, resp->mutable_root());
  }
  resp->set_cluster_uuid(options_.cluster_uuid);
  return Status::OK();
}

Status MetaService::Apply(Txn& t, const pb::CloseSessionReq& req, pb::CloseSessionResp*) {
  size_t budget = options_.session_end_batch;
  return EndSession(t, req.ctx().session_id(), &budget).status();
}

Result<bool> MetaService::EndSession(Txn& t, uint64_t session_id, size_t* budget) {
  std::vector<pb::OpenRecord> opens;
  bool more = false;
  Status parse;
  const std::string prefix = OpenPrefix(session_id);
  CIUIC_RETURN_IF_ERROR(
      t.Scan(Cf::kSessions, prefix, PrefixEnd(prefix), [&](std::string_view, std::string_view v) {
        if (opens.size() >= *budget) {
          more = true;
          return false;
        }
        pb::OpenRecord o;
        if (!o.ParseFromArray(v.data(), static_cast<int>(v.size()))) {
          parse = Status::Corruption(fmt::format("bad open record of session {}", session_id));
          return false;
        }
        opens.push_back(std::move(o));
        return true;
      }));
  CIUIC_RETURN_IF_ERROR(parse);
  *budget -= opens.size();
  for (const auto& o : opens) {
    // An open for writing that its client never closed may have written: the data_version
    // moves, so no node cache serves blocks of the file cached before those writes landed.
    const bool may_have_written = (o.flags() & O_ACCMODE) != O_RDONLY;
    CIUIC_RETURN_IF_ERROR(EndOpen(t, session_id, o.open_id(), ToFid(o.fid()), may_have_written));
  }
  if (more) {
    // Too many opens for one batch: the session is dead for its client now (no renewal, no new
    // opens, no locks), and the ticks release the rest, session_end_batch per commit.
    t.OnCommit([this, session_id] {
      std::lock_guard lock(sess_mu_);
      auto it = sessions_.find(session_id);
      if (it != sessions_.end())
        it->second.ending = true;
      locks_.ReleaseSession(session_id);
    });
    return false;
  }
  t.Delete(Cf::kSessions, SessionKey(session_id));
  t.OnCommit([this, session_id] {
    std::lock_guard lock(sess_mu_);
    auto it = sessions_.find(session_id);
    if (it != sessions_.end()) {
      auto k = sessions_per_key_.find(it->second.key_id);
      if (k != sessions_per_key_.end() && --k->second == 0)
        sessions_per_key_.erase(k);
      sessions_.erase(it);
    }
    locks_.ReleaseSession(session_id);
  });
  return true;
}

Result<uint64_t> MetaService::AddOpen(Txn& t,
                                      uint64_t session_id,
                                      pb::InodeRecord* rec,
                                      uint32_t flags) {
  if (session_id == 0)
    return uint64_t{0};  // no session: the open is not tracked
  std::string v;
  Status st = t.Get(Cf::kSessions, SessionKey(session_id), &v);
  if (st.code() == StatusCode::kNotFound) {
    return Status::Stale(
        fmt::format("session {} is unknown or expired; open a new one", session_id));
  }
  CIUIC_RETURN_IF_ERROR(st);
  {
    // Counted now (given back if this mutation fails), so a group cannot overshoot the cap.
    std::lock_guard lock(sess_mu_);
    auto it = sessions_.find(session_id);
    if (it != sessions_.end()) {
      if (it->second.ending) {
        return Status::Stale(
            fmt::format("session {} is unknown or expired; open a new one", session_id));
      }
      if (it->second.opens >= options_.max_opens_per_session) {
        return Status::NoSpace(fmt::format("too many open files in this session (cap {})",
                                           options_.max_opens_per_session));
      }
      ++it->second.opens;
    }
  }
  t.OnAbort([this, session_id] { DropOpenCount(session_id); });
  const uint64_t open_id = Allocate(t, &open_seq_);
  pb::OpenRecord o;
  o.set_open_id(open_id);
  *o.mutable_fid() = rec->attr().fid();
  o.set_flags(flags);
  t.Put(Cf::kSessions, OpenKey(session_id, open_id), o.SerializeAsString());
  t.OnCommit([this] { open_files_.fetch_add(1, std::memory_order_relaxed); });
  rec->set_open_count(rec->open_count() + 1);
  return open_id;
}

Status MetaService::EndOpen(Txn& t,
                            uint64_t session_id,
                            uint64_t open_id,
                            const Fid& fid,
                            bool wrote,
                            const pb::CloseReq* close,
                            pb::CloseResp* resp) {
  bool found = false;
  Fid target = fid;
  if (session_id != 0 && open_id != 0) {
    std::string v;
    Status st = t.Get(Cf::kSessions, OpenKey(session_id, open_id), &v);
    if (st.ok()) {
      pb::OpenRecord o;
      if (!o.ParseFromString(v))
        return Status::Corruption("bad open record");
      if (fid.valid() && ToFid(o.fid()) != fid) {
        return Status::InvalidArgument(
            fmt::format("open {} is not an open of {}", open_id, fid.ToString()));
      }
      target = ToFid(o.fid());
      found = true;
      t.Delete(Cf::kSessions, OpenKey(session_id, open_id));
      t.OnCommit([this, session_id] {
        open_files_.fetch_sub(1, std::memory_order_relaxed);
        DropOpenCount(session_id);
      });
    } else if (st.code() != StatusCode::kNotFound) {
      return st;
    }
  }
  // An unknown open (expired session, duplicate close) still records `wrote`, and succeeds:
  // close(2) has nothing useful to report.
  if (!target.valid() || (!found && !wrote))
    return Status::OK();
  pb::InodeRecord rec;
  Status gs = GetInode(t, target, &rec);
  if (gs.code() == StatusCode::kNotFound)
    return Status::OK();
  CIUIC_RETURN_IF_ERROR(gs);
  if (found && rec.open_count() > 0)
    rec.set_open_count(rec.open_count() - 1);
  const bool sole = found && wrote && close != nullptr && close->check_sole() &&
                    rec.attr().data_version() == close->opened_version() && rec.open_count() == 0 &&
                    IsReg(rec) && !rec.orphan();
  if (wrote)
    rec.mutable_attr()->set_data_version(rec.attr().data_version() + 1);
  if (sole && resp != nullptr)
    resp->set_sole_version(rec.attr().data_version());
  if (rec.orphan() && rec.open_count() == 0)
    return DestroyInode(t, rec);
  PutInode(t, rec);
  if (wrote && IsReg(rec) && !rec.orphan())
    CIUIC_RETURN_IF_ERROR(QueueExportOnClose(t, rec));
  return Status::OK();
}

void MetaService::DropOpenCount(uint64_t session_id) {
  std::lock_guard lock(sess_mu_);
  auto it = sessions_.find(session_id);
  if (it != sessions_.end() && it->second.opens > 0)
    --it->second.opens;
}

Result<pb::LockResp> MetaService::Lock(const pb::LockReq& req) {
  const Fid fid = ToFid(req.fid());
  if (!fid.valid())
    return Status::InvalidArgument("lock: no file given");
  LockTable::Lock l;
  l.session = req.ctx().session_id();
  l.owner = req.owner();
  l.kind = req.kind();
  l.type = req.type();
  l.start = req.start();
  l.end = req.end();
  l.pid = req.pid();
  if (l.kind != LockTable::kPosix && l.kind != LockTable::kFlock)
    return Status::InvalidArgument(fmt::format("lock: bad kind {}", l.kind));
  if (l.type < LockTable::kShared || l.type > LockTable::kUnlock)
    return Status::InvalidArgument(fmt::format("lock: bad type {}", l.type));
  if (l.kind == LockTable::kFlock) {
    l.start = 0;
    l.end = UINT64_MAX;
  }
  if (l.start > l.end)
    return Status::InvalidArgument("lock: range ends before it starts");
  if (req.test() && l.type == LockTable::kUnlock)
    return Status::InvalidArgument("lock: testing an unlock");
  pb::LockResp resp;
  std::lock_guard lock(sess_mu_);
  auto session = sessions_.find(l.session);
  if (l.session == 0 || session == sessions_.end() || session->second.ending) {
    return Status::Stale(
        fmt::format("session {} is unknown or expired; open a new one", l.session));
  }
  const LockTable::Lock* c = l.type == LockTable::kUnlock ? nullptr : locks_.FindConflict(fid, l);
  if (c != nullptr) {
    resp.set_granted(false);
    resp.set_conflict_type(c->type);
    resp.set_conflict_start(c->start);
    resp.set_conflict_end(c->end);
    resp.set_conflict_pid(c->pid);
    return resp;
  }
  if (!req.test())
    CIUIC_RETURN_IF_ERROR(locks_.Apply(fid, l));
  resp.set_granted(true);
  return resp;
}

}  // namespace ciuic::meta
