#include "objstore/s3_http.h"

#include <cstring>
#include <mutex>

#include <curl/curl.h>

namespace ciuic::objstore {
namespace {

// Bounds what an answer that is not written into a sink may make us hold (a ListObjectsV2 page
// of 1000 long keys is a few hundred KiB).
constexpr size_t kMaxBodyBytes = 64 << 20;

void GlobalInitOnce() {
  // curl_global_init is not thread-safe on every build of libcurl: call it once, before any
  // handle exists, and never clean up (handles may live until exit).
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

struct Transfer {
  const HttpRequest* req = nullptr;
  CURL* handle = nullptr;
  HttpResponse* resp = nullptr;
  size_t body_offset = 0;  // upload position
  bool sink_overflow = false;
  bool body_too_big = false;
};

size_t OnWrite(char* data, size_t size, size_t nmemb, void* user) {
  auto* t = static_cast<Transfer*>(user);
  size_t n = size * nmemb;
  long status = 0;
  curl_easy_getinfo(t->handle, CURLINFO_RESPONSE_CODE, &status);
  bool to_sink = !t->req->sink.empty() && status >= 200 && status < 300;
  if (to_sink) {
    size_t room = t->req->sink.size() - t->resp->sink_bytes;
    if (n > room) {
      t->sink_overflow = true;
      return 0;  // aborts the transfer with CURLE_WRITE_ERROR
    }
    std::memcpy(t->req->sink.data() + t->resp->sink_bytes, data, n);
    t->resp->sink_bytes += n;
    return n;
  }
  if (t->resp->body.size() + n > kMaxBodyBytes) {
    t->body_too_big = true;
    return 0;
  }
  t->resp->body.append(data, n);
  return n;
}

size_t OnHeader(char* data, size_t size, size_t nmemb, void* user) {
  auto* t = static_cast<Transfer*>(user);
  size_t n = size * nmemb;
  std::string_view line(data, n);
  if (line.starts_with("HTTP/")) {
    // A new status line (after "100 Continue"): forget the headers of the one before.
    t->resp->headers.clear();
    return n;
  }
  size_t colon = line.find(':');
  if (colon == std::string_view::npos) {
    return n;
  }
  std::string name(line.substr(0, colon));
  for (char& c : name) {
    if (c >= 'A' && c <= 'Z') {
      c = static_cast<char>(c - 'A' + 'a');
    }
  }
  std::string_view value = line.substr(colon + 1);
  while (!value.empty() && (value.front() == ' ' || value.front() == '\t')) {
    value.remove_prefix(1);
  }
  while (!value.empty() && (value.back() == '\r' || value.back() == '\n' || value.back() == ' ')) {
    value.remove_suffix(1);
  }
  t->resp->headers[name] = std::string(value);
  return n;
}

size_t OnRead(char* buffer, size_t size, size_t nitems, void* user) {
  auto* t = static_cast<Transfer*>(user);
  size_t n = std::min(size * nitems, t->req->body.size() - t->body_offset);
  std::memcpy(buffer, t->req->body.data() + t->body_offset, n);
  t->body_offset += n;
  return n;
}

// curl rewinds the body when it resends a request, e.g. on a kept-alive connection the server
// had closed.
int OnSeek(void* user, curl_off_t offset, int origin) {
  auto* t = static_cast<Transfer*>(user);
  if (origin != SEEK_SET || offset < 0 || static_cast<size_t>(offset) > t->req->body.size()) {
    return CURL_SEEKFUNC_CANTSEEK;
  }
  t->body_offset = static_cast<size_t>(offset);
  return CURL_SEEKFUNC_OK;
}

Status TransportStatus(CURLcode rc, const char* errbuf, const Transfer& t) {
  std::string msg = curl_easy_strerror(rc);
  if (errbuf[0] != '\0') {
    msg += ": ";
    msg += errbuf;
  }
  switch (rc) {
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_RESOLVE_PROXY:
    case CURLE_COULDNT_CONNECT:
    case CURLE_SEND_ERROR:
    case CURLE_RECV_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_PARTIAL_FILE:
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
      return Status::Unavailable(msg);
    case CURLE_OPERATION_TIMEDOUT:
      return Status::TimedOut(msg);
    case CURLE_WRITE_ERROR:
      if (t.sink_overflow) {
        return Status::Corruption("the server sent more body than was asked for");
      }
      if (t.body_too_big) {
        return Status::Corruption("the server sent a body over " +
                                  std::to_string(kMaxBodyBytes >> 20) + " MiB");
      }
      return Status::IoError(msg);
    default:
      return Status::IoError(msg);
  }
}

}  // namespace

HttpClient::HttpClient(HttpOptions opts) : opts_(std::move(opts)) {
  GlobalInitOnce();
}

HttpClient::~HttpClient() {
  for (CURL* h : idle_) {
    curl_easy_cleanup(h);
  }
}

CURL* HttpClient::Acquire() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!idle_.empty()) {
      CURL* h = idle_.back();
      idle_.pop_back();
      return h;
    }
  }
  return curl_easy_init();
}

void HttpClient::Release(CURL* handle) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (idle_.size() < opts_.max_idle_handles) {
      idle_.push_back(handle);
      return;
    }
  }
  curl_easy_cleanup(handle);
}

Result<HttpResponse> HttpClient::Perform(const HttpRequest& req) {
  CURL* h = Acquire();
  if (h == nullptr) {
    return Status::Internal("curl_easy_init failed");
  }
  // reset keeps the handle's live connections, DNS and TLS session caches.
  curl_easy_reset(h);

  HttpResponse resp;
  Transfer t{&req, h, &resp};
  char errbuf[CURL_ERROR_SIZE];
  errbuf[0] = '\0';

  curl_slist* headers = nullptr;
  for (const auto& [name, value] : req.headers) {
    headers = curl_slist_append(headers, (name + ": " + value).c_str());
  }
  // No "Expect: 100-continue" round trip before a body; no default Accept.
  headers = curl_slist_append(headers, "Expect:");
  headers = curl_slist_append(headers, "Accept:");
  curl_slist* connect_to = nullptr;
  for (const std::string& entry : opts_.connect_to) {
    connect_to = curl_slist_append(connect_to, entry.c_str());
  }

  curl_easy_setopt(h, CURLOPT_URL, req.url.c_str());
  curl_easy_setopt(h, CURLOPT_PATH_AS_IS, 1L);
  curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(h, CURLOPT_ERRORBUFFER, errbuf);
  curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers);
  curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 0L);
  curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(opts_.connect_timeout.count()));
  curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, static_cast<long>(opts_.low_speed_limit));
  curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, static_cast<long>(opts_.low_speed_time.count()));
  curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, static_cast<long>(opts_.request_timeout.count()));
  curl_easy_setopt(h, CURLOPT_TCP_KEEPALIVE, 1L);
  if (!opts_.verify_tls) {
    curl_easy_setopt(h, CURLOPT_SSL_VERIFYPEER, 0L);
    curl_easy_setopt(h, CURLOPT_SSL_VERIFYHOST, 0L);
  }
  if (connect_to != nullptr) {
    curl_easy_setopt(h, CURLOPT_CONNECT_TO, connect_to);
  }
  curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, &OnWrite);
  curl_easy_setopt(h, CURLOPT_WRITEDATA, &t);
  curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, &OnHeader);
  curl_easy_setopt(h, CURLOPT_HEADERDATA, &t);

  if (req.method == "GET") {
    curl_easy_setopt(h, CURLOPT_HTTPGET, 1L);
  } else if (req.method == "HEAD") {
    curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
  } else if (req.method == "PUT" || req.method == "POST") {
    curl_easy_setopt(h, CURLOPT_UPLOAD, 1L);
    curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, req.method.c_str());
    curl_easy_setopt(h, CURLOPT_INFILESIZE_LARGE, static_cast<curl_off_t>(req.body.size()));
    curl_easy_setopt(h, CURLOPT_READFUNCTION, &OnRead);
    curl_easy_setopt(h, CURLOPT_READDATA, &t);
    curl_easy_setopt(h, CURLOPT_SEEKFUNCTION, &OnSeek);
    curl_easy_setopt(h, CURLOPT_SEEKDATA, &t);
  } else {
    curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, req.method.c_str());
  }

  CURLcode rc = curl_easy_perform(h);
  if (rc == CURLE_OK) {
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &resp.status);
  }
  Status st = rc == CURLE_OK ? Status::OK() : TransportStatus(rc, errbuf, t);
  // Nothing may point at this frame once the handle is pooled.
  curl_easy_setopt(h, CURLOPT_ERRORBUFFER, nullptr);
  curl_easy_setopt(h, CURLOPT_HTTPHEADER, nullptr);
  curl_easy_setopt(h, CURLOPT_CONNECT_TO, nullptr);
  curl_slist_free_all(headers);
  curl_slist_free_all(connect_to);
  Release(h);
  if (!st.ok()) {
    return st;
  }
  return resp;
}

}  // namespace ciuic::objstore
