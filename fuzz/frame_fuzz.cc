// Fuzz target: the frame header codec (net/frame.h) over a stream of arbitrary bytes, as a
// connection's reader sees them: header, limits, body, CRC, the error body of error replies;
// and every header that decodes must encode back to the same bytes.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "ciuic.pb.h"
#include "net/frame.h"
#include "net/rpc.h"

using ciuic::net::FrameHeader;
using ciuic::net::kFrameHeaderSize;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // Small limits so that lengths near and over them are reachable.
  const ciuic::net::FrameLimits limits{.max_body = 4096, .max_data = 1u << 20};
  while (size >= kFrameHeaderSize) {
    FrameHeader h;
    if (!ciuic::net::DecodeFrameHeader(data, limits, &h).ok())
      return 0;
    const uint8_t* header = data;
    data += kFrameHeaderSize;
    size -= kFrameHeaderSize;
    const size_t body_len = h.body_len < size ? h.body_len : size;
    const std::string_view body(reinterpret_cast<const char*>(data), body_len);
    (void)ciuic::net::MsgTypeName(h.type);
    if (ciuic::net::VerifyFrameCrc(header, h, body).ok()) {
      // A frame that checks out encodes back to the same header.
      uint8_t again[kFrameHeaderSize];
      ciuic::net::EncodeFrameHeader(h, body, again);
      if (body_len == h.body_len && std::memcmp(again, header, kFrameHeaderSize) != 0)
        std::abort();
      if ((h.flags & ciuic::net::kFlagError) != 0) {
        ciuic::pb::ErrorInfo e;
        ciuic::net::Parse(body, &e, "error").IgnoreError();  // any outcome is fine
      }
    }
    const size_t skip = body_len + (h.data_len < size - body_len ? h.data_len : size - body_len);
    data += skip;
    size -= skip;
  }
  return 0;
}
