// Conversions between the common value types and their protobuf forms. Header-only, cheap.
#pragma once

#include "ciuic.pb.h"
#include "common/fid.h"
#include "common/layout.h"
#include "common/status.h"
#include "common/time_util.h"

namespace ciuic::net {

inline void ToPb(const Fid& f, pb::Fid* out) {
  out->set_seq(f.seq);
  out->set_mds(f.mds);
  out->set_ver(f.ver);
}
inline Fid FromPb(const pb::Fid& f) {
  return Fid{f.seq(), f.mds(), f.ver()};
}

inline void ToPb(const ObjectId& o, pb::ObjectId* out) {
  ToPb(o.fid, out->mutable_fid());
  out->set_comp(o.comp);
  out->set_stripe(o.stripe);
}
inline ObjectId FromPb(const pb::ObjectId& o) {
  return ObjectId{FromPb(o.fid()), o.comp(), o.stripe()};
}

inline void ToPb(const Timespec& t, pb::Timespec* out) {
  out->set_sec(t.sec);
  out->set_nsec(t.nsec);
}
inline Timespec FromPb(const pb::Timespec& t) {
  return Timespec{t.sec(), t.nsec()};
}

inline void ToPb(const LayoutComponent& c, pb::Component* out) {
  out->set_id(c.id);
  out->set_start(c.start);
  out->set_end(c.end);
  out->set_stripe_size(c.stripe_size);
  out->set_stripe_count(c.stripe_count);
  out->set_replicas(c.replicas);
  out->clear_osts();
  for (auto o : c.osts)
    out->add_osts(o);
}
inline LayoutComponent FromPb(const pb::Component& c) {
  LayoutComponent out;
  out.id = c.id();
  out.start = c.start();
  out.end = c.end();
  out.stripe_size = c.stripe_size();
  out.stripe_count = c.stripe_count();
  out.replicas = c.replicas();
  out.osts.assign(c.osts().begin(), c.osts().end());
  return out;
}

inline void ToPb(const FileLayout& l, pb::Layout* out) {
  out->Clear();
  out->set_pattern(l.pattern);
  for (const auto& c : l.components)
    ToPb(c, out->add_components());
}
inline FileLayout FromPb(const pb::Layout& l) {
  FileLayout out;
  out.pattern = l.pattern();
  for (const auto& c : l.components())
    out.components.push_back(FromPb(c));
  return out;
}

inline Status FromPb(const pb::ErrorInfo& e) {
  auto code = static_cast<StatusCode>(e.code());
  if (code == StatusCode::kOk)
    code = StatusCode::kInternal;
  return Status(code, e.message());
}
inline void ToPb(const Status& s, pb::ErrorInfo* out) {
  out->set_code(static_cast<uint32_t>(s.code()));
  out->set_message(s.message());
}

}  // namespace ciuic::net
