#include "daemon/store/snapshot_format.h"

#include <cstring>
#include <limits>

#include "daemon/store/crc32c.h"

namespace gnmr {
namespace store {
namespace {

constexpr uint32_t kHeaderLen = 20;                    // the fields this version writes
constexpr uint32_t kMaxHeaderLen = 4096;               // a bound for future versions
constexpr size_t kFixed = sizeof(kSnapshotMagic) + 4;  // magic + header_len

void PutU32(std::string* out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out->push_back(static_cast<char>(v >> (8 * i)));
}

void PutU64(std::string* out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out->push_back(static_cast<char>(v >> (8 * i)));
}

uint32_t GetU32(const char* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) {
    v |= static_cast<uint32_t>(static_cast<unsigned char>(p[i])) << (8 * i);
  }
  return v;
}

uint64_t GetU64(const char* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) {
    v |= static_cast<uint64_t>(static_cast<unsigned char>(p[i])) << (8 * i);
  }
  return v;
}

}  // namespace

StatusOr<std::string> EncodeSnapshotFrame(const SnapshotFrame& f) {
  return EncodeSnapshotFrame(
      f.job_id, f.state.size(),
      [&f](std::string* out) {
        out->append(f.state);
        return true;
      },
      f.meta, f.saved_unix_ms);
}

StatusOr<std::string> EncodeSnapshotFrame(const std::string& job_id, size_t state_len,
                                          const std::function<bool(std::string*)>& append_state,
                                          const std::string& meta, int64_t saved_unix_ms) {
  constexpr size_t kMax = std::numeric_limits<uint32_t>::max();
  if (job_id.size() > kMax || state_len > kMax || meta.size() > kMax) {
    return InvalidArgument("snapshot part of 4 GiB or more");
  }
  std::string out;
  out.reserve(kFixed + kHeaderLen + job_id.size() + state_len + meta.size() + 4);
  out.append(kSnapshotMagic, sizeof(kSnapshotMagic));
  PutU32(&out, kHeaderLen);
  PutU32(&out, static_cast<uint32_t>(job_id.size()));
  PutU32(&out, static_cast<uint32_t>(state_len));
  PutU32(&out, static_cast<uint32_t>(meta.size()));
  PutU64(&out, static_cast<uint64_t>(saved_unix_ms));
  out += job_id;
  const size_t before = out.size();
  if (!append_state(&out) || out.size() != before + state_len) {
    return Internal("snapshot state did not serialize to its announced size");
  }
  out += meta;
  PutU32(&out, Crc32c(out));
  return out;
}

StatusOr<SnapshotFrame> DecodeSnapshotFrame(std::string_view bytes, const std::string& what) {
  auto loss = [&what](const std::string& why) {
    return DataLoss(what + ": corrupt snapshot: " + why);
  };
  if (bytes.size() < kFixed + kHeaderLen + 4) {
    return loss("truncated (" + std::to_string(bytes.size()) + " bytes)");
  }
  if (std::memcmp(bytes.data(), kSnapshotMagic, sizeof(kSnapshotMagic)) != 0) {
    return loss("bad magic");
  }
  const size_t body = bytes.size() - 4;
  const uint32_t stored = GetU32(bytes.data() + body);
  const uint32_t computed = Crc32c(bytes.substr(0, body));
  if (stored != computed) return loss("checksum mismatch");

  const char* p = bytes.data();
  const uint32_t header_len = GetU32(p + sizeof(kSnapshotMagic));
  if (header_len < kHeaderLen || header_len > kMaxHeaderLen) {
    return loss("bad header length " + std::to_string(header_len));
  }
  const char* h = p + kFixed;
  const uint64_t id_len = GetU32(h);
  const uint64_t state_len = GetU32(h + 4);
  const uint64_t meta_len = GetU32(h + 8);
  const uint64_t expected = kFixed + header_len + id_len + state_len + meta_len + 4;
  if (expected != bytes.size()) {
    return loss("lengths account for " + std::to_string(expected) + " bytes, file has " +
                std::to_string(bytes.size()));
  }
  SnapshotFrame f;
  f.saved_unix_ms = static_cast<int64_t>(GetU64(h + 12));
  size_t at = kFixed + header_len;
  f.job_id.assign(p + at, id_len);
  at += id_len;
  f.state.assign(p + at, state_len);
  at += state_len;
  f.meta.assign(p + at, meta_len);
  return f;
}

}  // namespace store
}  // namespace gnmr
