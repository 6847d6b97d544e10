#include "prompt_cache.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <stdexcept>

namespace mb {

namespace {
constexpr uint64_t kFileMagic = 0x31484341435042ull;  // "BPCACH1"
constexpr uint32_t kFormat = 1;
constexpr uint64_t kUsed = 0x4b434f4c42425050ull;     // a block's magic while it holds data
constexpr size_t kPage = 4096;

// File layout: [FileHeader ... FileCounters at kCountersAt, one page][Header x M][pad to a page]
// [K/V data: M x N x Bt]
struct FileHeader {
  uint64_t magic;
  uint32_t format, block_tokens;
  uint64_t token_bytes, n_blocks, header_bytes, data_offset;
};

constexpr size_t kCountersAt = 1024;

inline uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
inline uint64_t mix(uint64_t h) {
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  h *= 0xc4ceb9fe1a85ec53ull;
  h ^= h >> 33;
  return h;
}
size_t align_up(size_t n, size_t a) { return (n + a - 1) / a * a; }
}  // namespace

// Four independent multiply lanes over 32-byte strides: fast enough that checking a restore costs
// a small fraction of copying it.
uint64_t hash_bytes(const void* p, size_t n, uint64_t seed) {
  const uint8_t* b = static_cast<const uint8_t*>(p);
  constexpr uint64_t P1 = 0x9E3779B185EBCA87ull, P2 = 0xC2B2AE3D27D4EB4Full;
  uint64_t h[4] = {seed + P1 + P2, seed + P2, seed, seed - P1};
  size_t i = 0;
  for (; i + 32 <= n; i += 32)
    for (int l = 0; l < 4; l++) {
      uint64_t w;
      std::memcpy(&w, b + i + 8 * l, 8);
      h[l] = rotl(h[l] + w * P2, 31) * P1;
    }
  uint64_t acc = rotl(h[0], 1) + rotl(h[1], 7) + rotl(h[2], 12) + rotl(h[3], 18) + n;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    std::memcpy(&w, b + i, 8);
    acc = rotl(acc ^ (w * P2), 27) * P1;
  }
  for (; i < n; i++) acc = rotl(acc ^ (b[i] * P1), 11) * P2;
  return mix(acc);
}

// Totals Health reports, kept in the file so that they survive a worker restart with the blocks.
struct PromptCache::Counters {
  uint64_t evictions, rejected;
};

struct PromptCache::Header {
  uint64_t magic;     // kUsed while the block holds data; 0 = free (written first and last)
  uint64_t ns;        // namespace hash
  uint64_t key;       // hash of (parent, tokens)
  uint64_t parent;    // key of the block before it; the namespace hash at position 0
  uint32_t pos, n;    // positions [pos, pos + n)
  uint64_t stamp;     // LRU clock (not covered by the sums: touched on every use)
  uint64_t data_sum;  // tokens [n] + K/V bytes [n][Bt]
  uint64_t head_sum;  // ns, key, parent, pos, n, data_sum
  int32_t tokens[kBlockTokens];
};

PromptCache::PromptCache(const std::string& path, uint64_t cap_bytes, size_t token_bytes, const std::string& ns)
    : Bt_(token_bytes), cap_bytes_(cap_bytes) {
  const std::string layout = ns + "\n" + "kv_token_bytes=" + std::to_string(Bt_) + " block_tokens=" +
                             std::to_string(kBlockTokens) + " format=" + std::to_string(kFormat);
  ns_hash_ = hash_bytes(layout.data(), layout.size(), 0x6d617368626f78ull) | 1;  // never 0
  const uint64_t ns_hi = hash_bytes(layout.data(), layout.size(), ns_hash_);
  char hex[33];
  std::snprintf(hex, sizeof hex, "%016llx%016llx", (unsigned long long)ns_hi, (unsigned long long)ns_hash_);
  ns_id_ = hex;
  if (Bt_ == 0 || cap_bytes == 0) return;
  header_bytes_ = sizeof(Header);
  block_data_bytes_ = size_t(kBlockTokens) * Bt_;
  stride_ = header_bytes_ + block_data_bytes_;
  // The file (headers, data and two pages of alignment) stays within the cap.
  const uint64_t room = cap_bytes > 2 * kPage ? cap_bytes - 2 * kPage : 0;
  n_blocks_ = uint32_t(std::min<uint64_t>(room / stride_, UINT32_MAX));
  if (n_blocks_ == 0) return;
  const size_t data_offset = align_up(kPage + size_t(n_blocks_) * header_bytes_, kPage);
  open_file(path, data_offset + size_t(n_blocks_) * block_data_bytes_);
  auto* fh = reinterpret_cast<FileHeader*>(base_);
  const FileHeader want{kFileMagic, kFormat, kBlockTokens, Bt_, n_blocks_, header_bytes_, data_offset};
  counters_ = reinterpret_cast<Counters*>(base_ + kCountersAt);
  if (std::memcmp(fh, &want, sizeof want) != 0) {
    // Another layout (or a new file): nothing in it can be read as this one.
    std::memset(base_ + kPage, 0, size_t(n_blocks_) * header_bytes_);
    std::memset(counters_, 0, sizeof(Counters));
    std::memcpy(fh, &want, sizeof want);
  }
  evictions_ = int64_t(counters_->evictions);
  rejected_ = int64_t(counters_->rejected);
  meta_.assign(n_blocks_, Meta{});
  rebuild();
}

PromptCache::~PromptCache() {
  if (base_) munmap(base_, map_bytes_);
  if (fd_ >= 0) close(fd_);  // also releases the flock
}

void PromptCache::open_file(const std::string& path, size_t file_bytes) {
  map_bytes_ = file_bytes;
  if (!path.empty()) {
    int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    // One writer per file: a second live process (say, a worker that has not exited yet) gets a
    // private cache instead of tearing the first one's blocks.
    if (fd >= 0 && flock(fd, LOCK_EX | LOCK_NB) == 0 && ftruncate(fd, off_t(file_bytes)) == 0) {
      void* p = mmap(nullptr, file_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
      if (p != MAP_FAILED) {
        base_ = static_cast<uint8_t*>(p);
        fd_ = fd;
        persistent_ = true;
        return;
      }
    }
    if (fd >= 0) close(fd);
  }
  void* p = mmap(nullptr, file_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) throw std::runtime_error("prompt cache: cannot map " + std::to_string(file_bytes) + " bytes");
  base_ = static_cast<uint8_t*>(p);
}

PromptCache::Header* PromptCache::header(uint32_t i) const {
  return reinterpret_cast<Header*>(base_ + kPage + size_t(i) * header_bytes_);
}

uint8_t* PromptCache::data(uint32_t i) const {
  const auto* fh = reinterpret_cast<const FileHeader*>(base_);
  return base_ + fh->data_offset + size_t(i) * block_data_bytes_;
}

uint64_t PromptCache::block_checksum(uint32_t i) const {
  const Header* h = header(i);
  const uint64_t t = hash_bytes(h->tokens, size_t(h->n) * sizeof(int32_t), h->key);
  return hash_bytes(data(i), size_t(h->n) * Bt_, t);
}

uint64_t PromptCache::header_checksum(const Header& h) const {
  const uint64_t f[6] = {h.ns, h.key, h.parent, (uint64_t(h.pos) << 32) | h.n, h.data_sum, ns_hash_};
  return hash_bytes(f, sizeof f, 0x68656164ull);
}

void PromptCache::rebuild() {
  // Blocks left by an earlier process: keep those of this namespace whose header checks out and
  // that still hang from the root; the data checksum is checked when a block is restored.
  for (uint32_t i = 0; i < n_blocks_; i++) {
    Header* h = header(i);
    if (h->magic != kUsed || h->ns != ns_hash_) {
      free_.push_back(i);
      continue;
    }
    const bool ok = h->n >= 1 && h->n <= kBlockTokens && h->pos % kBlockTokens == 0 && h->head_sum == header_checksum(*h) &&
                    (h->pos == 0) == (h->parent == ns_hash_);
    if (!ok) {
      count_rejected();
      __atomic_store_n(&h->magic, 0, __ATOMIC_RELEASE);
      free_.push_back(i);
      continue;
    }
    meta_[i] = Meta{true, h->key, h->parent, h->pos, h->n, h->stamp};
    clock_ = std::max(clock_, h->stamp);
    link(i);
  }
  // Drop what the root no longer reaches (a parent evicted while its child was being written).
  std::vector<uint8_t> reach(n_blocks_, 0);
  std::vector<std::pair<uint64_t, uint32_t>> stack{{ns_hash_, 0}};  // (parent key, its children's pos)
  while (!stack.empty()) {
    const auto [k, pos] = stack.back();
    stack.pop_back();
    auto it = children_.find(k);
    if (it == children_.end()) continue;
    for (uint32_t c : it->second)
      if (!reach[c] && meta_[c].pos == pos) {
        reach[c] = 1;
        if (meta_[c].n == kBlockTokens) stack.push_back({meta_[c].key, pos + kBlockTokens});
      }
  }
  for (uint32_t i = 0; i < n_blocks_; i++)
    if (meta_[i].used && !reach[i]) {
      count_rejected();
      free_block(i, false);
    }
}

void PromptCache::count_rejected() {
  rejected_++;
  if (counters_) counters_->rejected = uint64_t(rejected_);
}

void PromptCache::link(uint32_t i) {
  const Meta& m = meta_[i];
  children_[m.parent].push_back(i);
  held_++;
  held_tokens_ += m.n;
}

void PromptCache::touch(uint32_t i, uint64_t stamp) {
  meta_[i].stamp = stamp;
  header(i)->stamp = stamp;
}

void PromptCache::free_block(uint32_t i, bool eviction) {
  Meta& m = meta_[i];
  if (!m.used) return;
  if (m.n == kBlockTokens) {
    auto it = children_.find(m.key);
    if (it != children_.end()) {
      const std::vector<uint32_t> kids = it->second;  // free_block edits the list
      for (uint32_t c : kids) free_block(c, eviction);
      children_.erase(m.key);
    }
  }
  auto it = children_.find(m.parent);
  if (it != children_.end()) {
    auto& v = it->second;
    v.erase(std::remove(v.begin(), v.end(), i), v.end());
    if (v.empty()) children_.erase(it);
  }
  __atomic_store_n(&header(i)->magic, 0, __ATOMIC_RELEASE);
  m.used = false;
  held_--;
  held_tokens_ -= m.n;
  if (eviction) {
    evictions_++;
    counters_->evictions = uint64_t(evictions_);
  }
  free_.push_back(i);
}

int64_t PromptCache::alloc(uint64_t protect_stamp) {
  if (free_.empty()) {
    // Oldest first; among equals the deepest, which is a leaf (see the header).
    int64_t victim = -1;
    for (uint32_t i = 0; i < n_blocks_; i++) {
      const Meta& m = meta_[i];
      if (!m.used || m.stamp >= protect_stamp) continue;
      if (victim < 0 || m.stamp < meta_[victim].stamp || (m.stamp == meta_[victim].stamp && m.pos > meta_[victim].pos))
        victim = i;
    }
    if (victim < 0) return -1;
    free_block(uint32_t(victim), true);
  }
  const uint32_t b = free_.back();
  free_.pop_back();
  return b;
}

PromptCache::Match PromptCache::lookup(const int32_t* tokens, size_t n) {
  Match m;
  if (!enabled()) return m;
  const uint64_t stamp = ++clock_;
  uint64_t parent = ns_hash_;
  size_t pos = 0;
  while (pos < n) {
    auto it = children_.find(parent);
    if (it == children_.end()) break;
    int64_t best = -1;
    size_t best_l = 0;
    for (uint32_t c : it->second) {
      const Header* h = header(c);
      const size_t lim = std::min<size_t>(meta_[c].n, n - pos);
      size_t l = 0;
      while (l < lim && h->tokens[l] == tokens[pos + l]) l++;
      if (l > best_l || (l == best_l && l > 0 && meta_[c].n > meta_[best].n)) {
        best = c;
        best_l = l;
      }
    }
    if (best < 0) break;
    touch(uint32_t(best), stamp);
    m.blocks.push_back(uint32_t(best));
    m.n = pos + best_l;
    if (best_l < kBlockTokens) break;
    parent = meta_[best].key;
    pos += kBlockTokens;
  }
  return m;
}

size_t PromptCache::restore(const Match& m, size_t from, size_t upto, const Writer& write) {
  size_t done = from;
  upto = std::min(upto, m.n);
  for (uint32_t b : m.blocks) {
    if (done >= upto) break;
    const Meta& mt = meta_[b];
    const size_t b0 = mt.pos, b1 = std::min<size_t>(size_t(mt.pos) + mt.n, upto);
    if (b1 <= done) continue;
    if (!mt.used || b0 > done || block_checksum(b) != header(b)->data_sum) {
      if (mt.used) {
        count_rejected();
        free_block(b, false);
      }
      break;
    }
    write(done, b1 - done, data(b) + (done - b0) * Bt_);
    done = b1;
  }
  restored_tokens_ += int64_t(done - from);
  return done;
}

void PromptCache::save(const int32_t* tokens, size_t n, const Reader& read) {
  if (!enabled()) return;
  const uint64_t stamp = ++clock_;
  uint64_t parent = ns_hash_;
  size_t pos = 0;
  while (pos < n) {
    const uint32_t m = uint32_t(std::min<size_t>(kBlockTokens, n - pos));
    int64_t found = -1;
    std::vector<uint32_t> dominated;  // partial leaves that are a prefix of this chunk
    auto it = children_.find(parent);
    if (it != children_.end())
      for (uint32_t c : it->second) {
        const Header* h = header(c);
        const uint32_t cn = meta_[c].n;
        if (cn >= m && std::equal(tokens + pos, tokens + pos + m, h->tokens)) {
          if (found < 0 || cn > meta_[found].n) found = c;
        } else if (cn < m && std::equal(h->tokens, h->tokens + cn, tokens + pos)) {
          dominated.push_back(c);
        }
      }
    if (found >= 0) {
      touch(uint32_t(found), stamp);
      if (m < kBlockTokens) break;
      parent = meta_[found].key;
      pos += m;
      continue;
    }
    const int64_t got = alloc(stamp);
    if (got < 0) break;
    const uint32_t b = uint32_t(got);
    for (uint32_t d : dominated) free_block(d, false);
    Header* h = header(b);
    __atomic_store_n(&h->magic, 0, __ATOMIC_RELEASE);
    try {
      read(pos, m, data(b));
    } catch (...) {
      free_.push_back(b);
      throw;
    }
    std::memcpy(h->tokens, tokens + pos, size_t(m) * sizeof(int32_t));
    h->ns = ns_hash_;
    h->key = hash_bytes(tokens + pos, size_t(m) * sizeof(int32_t), parent ^ (uint64_t(m) * 0x9E3779B97F4A7C15ull));
    h->parent = parent;
    h->pos = uint32_t(pos);
    h->n = m;
    h->stamp = stamp;
    h->data_sum = block_checksum(b);
    h->head_sum = header_checksum(*h);
    __atomic_store_n(&h->magic, kUsed, __ATOMIC_RELEASE);
    meta_[b] = Meta{true, h->key, parent, uint32_t(pos), m, stamp};
    link(b);
    saved_tokens_ += m;
    if (m < kBlockTokens) break;
    parent = h->key;
    pos += m;
  }
}

PromptCacheStats PromptCache::stats() const {
  PromptCacheStats s;
  s.cap_bytes = enabled() ? int64_t(cap_bytes_) : 0;
  s.bytes = held_ * int64_t(stride_);
  s.blocks = held_;
  s.tokens = held_tokens_;
  s.evictions = evictions_;
  s.rejected = rejected_;
  s.saved_tokens = saved_tokens_;
  s.restored_tokens = restored_tokens_;
  s.persistent = persistent_;
  return s;
}

}  // namespace mb
