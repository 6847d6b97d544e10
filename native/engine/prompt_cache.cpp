#include "prompt_cache.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <deque>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <unordered_set>

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

// The draft index's key for tokens [m]: hashed on every save of a block, so a multiply per token
// and one finalizer rather than hash_bytes.
uint64_t gram_hash(const int32_t* t) {
  uint64_t h = 0x9E3779B97F4A7C15ull;
  for (size_t k = 0; k < PromptCache::kDraftGram; k++) h = (h ^ uint32_t(t[k])) * 0xC2B2AE3D27D4EB4Full;
  return mix(h);
}
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

// ---- Disk tier -----------------------------------------------------------------------------
//
// File layout: [DiskFile][K/V data: n x Bt]. Everything a block needs travels in the header, so a
// file is read back without any other state.
namespace {
constexpr uint64_t kDiskMagic = 0x314b4c4258424d42ull;  // "BMBXBLK1"
constexpr uint32_t kDiskFormat = 1;
constexpr const char* kDiskSuffix = ".mbkv";

struct DiskFile {
  uint64_t magic;
  uint32_t format, block_tokens;
  uint64_t token_bytes;
  uint64_t ns_hi, ns_lo;  // the whole namespace id (a foreign file names another)
  uint64_t key, parent;
  uint32_t pos, n;
  uint64_t data_sum;      // as the host block's: tokens [n] + K/V bytes [n][Bt]
  int32_t tokens[PromptCache::kBlockTokens];
  uint64_t head_sum;      // every field above
};

uint64_t disk_head_sum(const DiskFile& f) { return hash_bytes(&f, offsetof(DiskFile, head_sum), 0x6469736bull); }

bool pid_gone(long pid) { return pid > 0 && kill(pid_t(pid), 0) != 0 && errno == ESRCH; }
}  // namespace

class DiskTier {
 public:
  struct Found {
    uint64_t key = 0;
    uint32_t n = 0;
  };

  DiskTier(PromptCache& c, const PromptCacheDisk& o, uint64_t ns_hi)
      : c_(c), dir_(o.dir), cap_(o.cap_bytes), ns_hi_(ns_hi), ns_lo_(c.ns_hash_), pins_(new std::atomic<uint8_t>[c.n_blocks_]) {
    for (uint32_t i = 0; i < c.n_blocks_; i++) pins_[i].store(0, std::memory_order_relaxed);
    char p[24];
    std::snprintf(p, sizeof p, "%016llx-", (unsigned long long)ns_hi_);
    prefix_ = p;
    max_queued_ = std::max<uint32_t>(1, c.n_blocks_ / 2);
    mkdir(dir_.c_str(), 0700);  // the caller made its parents; an existing one is fine
    scan();
    writer_ = std::thread([this] { run(); });
    reader_ = std::thread([this] { read_ahead(); });
  }

  ~DiskTier() {
    {
      std::lock_guard<std::mutex> lk(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    ra_cv_.notify_all();
    writer_.join();  // the queue is drained first: what a stopping server held reaches the disk
    reader_.join();
  }

  // The index's longest path matching tokens[pos, n) below `parent` (pos a multiple of N):
  // the files' keys in position order, and the end of the match. Reads no file.
  std::vector<uint64_t> walk(uint64_t parent, size_t pos, const int32_t* tokens, size_t n, size_t* end) {
    std::vector<uint64_t> keys;
    *end = pos;
    std::lock_guard<std::mutex> lk(mu_);
    while (pos < n) {
      auto it = kids_.find(parent);
      if (it == kids_.end()) break;
      uint64_t best = 0;
      size_t best_l = 0;
      uint32_t best_n = 0;
      for (uint64_t k : it->second) {
        const Entry& e = entries_.at(k);
        if (e.pos != pos) continue;
        const size_t lim = std::min<size_t>(e.n, n - pos);
        size_t l = 0;
        while (l < lim && e.tokens[l] == tokens[pos + l]) l++;
        if (l > best_l) {
          best = k;
          best_l = l;
          best_n = e.n;
        }
      }
      if (best_l == 0) break;
      keys.push_back(best);
      *end = pos + best_l;
      if (best_n < PromptCache::kBlockTokens || best_l < PromptCache::kBlockTokens) break;
      parent = best;
      pos += PromptCache::kBlockTokens;
    }
    return keys;
  }

  // The files of the longest prefix of tokens the index holds, handed to the reader thread.
  size_t prefetch(const int32_t* tokens, size_t n) {
    size_t end = 0;
    std::vector<uint64_t> keys = walk(ns_lo_, 0, tokens, n, &end);
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (keys.empty() || stop_) return 0;
      // Only the newest request's blocks matter: an older list not started yet is replaced.
      ra_keys_ = keys;
    }
    ra_cv_.notify_all();
    return keys.size();
  }

  bool pinned(uint32_t b) const { return pins_[b].load(std::memory_order_acquire) != 0; }

  // A new host block: written behind unless the directory has it (or it is on its way).
  void enqueue(uint32_t b, const PromptCache::Header& h) {
    std::lock_guard<std::mutex> lk(mu_);
    auto it = entries_.find(h.key);
    if (it != entries_.end()) {
      it->second.stamp = ++clock_;
      return;
    }
    if (queued_keys_.count(h.key)) return;
    if (queue_.size() >= max_queued_) {
      // The writer is far behind (a slow disk): the block stays in host memory only rather than
      // pinning it all.
      if (!logged_behind_) std::fprintf(stderr, "mashbox: prompt cache dir %s: writes fall behind; some blocks stay in host memory only\n", dir_.c_str());
      logged_behind_ = true;
      return;
    }
    Job j;
    j.block = b;
    j.f = DiskFile{};
    j.f.key = h.key;
    j.f.parent = h.parent;
    j.f.pos = h.pos;
    j.f.n = h.n;
    j.f.data_sum = h.data_sum;
    std::memcpy(j.f.tokens, h.tokens, sizeof j.f.tokens);
    pins_[b].store(1, std::memory_order_release);
    queued_keys_.insert(h.key);
    queue_.push_back(j);
    cv_.notify_all();
  }

  void touch(uint64_t key) {
    std::lock_guard<std::mutex> lk(mu_);
    auto it = entries_.find(key);
    if (it != entries_.end()) it->second.stamp = ++clock_;
  }

  // The child of `parent` at pos whose tokens match the most of tokens[0, n), if more than `than`.
  bool best_child(uint64_t parent, uint32_t pos, const int32_t* tokens, size_t n, size_t than, Found& out) {
    std::lock_guard<std::mutex> lk(mu_);
    auto it = kids_.find(parent);
    if (it == kids_.end()) return false;
    size_t best_l = than;
    const Entry* best = nullptr;
    for (uint64_t k : it->second) {
      const Entry& e = entries_.at(k);
      if (e.pos != pos) continue;
      const size_t lim = std::min<size_t>(e.n, n);
      size_t l = 0;
      while (l < lim && e.tokens[l] == tokens[l]) l++;
      if (l > best_l || (best && l == best_l && e.n > best->n)) {
        best = &e;
        best_l = l;
        out.key = k;
        out.n = e.n;
      }
    }
    if (!best) return false;
    entries_.at(out.key).stamp = ++clock_;
    return true;
  }

  // Reads a block's file into dst [n][Bt], checking its header; a bad file is removed.
  bool read(uint64_t key, DiskFile& f, uint8_t* dst) {
    const std::string path = path_of(key);
    const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      forget(key, false);  // another server's cap removed it
      return false;
    }
    bool ok = pread(fd, &f, sizeof f, 0) == ssize_t(sizeof f) && valid(f) && f.key == key;
    const size_t bytes = ok ? size_t(f.n) * c_.Bt_ : 0;
    ok = ok && pread(fd, dst, bytes, sizeof f) == ssize_t(bytes);
    close(fd);
    if (!ok) reject(key, "torn");
    else hit_tokens_.fetch_add(f.n, std::memory_order_relaxed);
    return ok;
  }

  void reject(uint64_t key, const char* why) {
    forget(key, true);
    std::fprintf(stderr, "mashbox: prompt cache dir %s: removed a %s block file\n", dir_.c_str(), why);
  }

  void flush() {
    std::unique_lock<std::mutex> lk(mu_);
    idle_cv_.wait(lk, [&] { return queue_.empty() && !writing_; });
  }

  void fill(PromptCacheStats& s) const {
    std::lock_guard<std::mutex> lk(mu_);
    s.disk_bytes = int64_t(bytes_);
    s.disk_cap_bytes = int64_t(cap_);
    s.disk_blocks = int64_t(entries_.size());
    s.disk_hit_tokens = hit_tokens_.load(std::memory_order_relaxed);
    s.disk_evictions = evictions_;
    s.disk_rejected = rejected_;
    s.disk_written = written_;
    s.disk_write_errors = write_errors_;
  }

 private:
  struct Entry {
    uint64_t parent = 0;
    uint32_t pos = 0, n = 0;
    std::array<int32_t, PromptCache::kBlockTokens> tokens{};
    uint64_t stamp = 0;
    uint64_t bytes = 0;
  };
  struct Job {
    uint32_t block = 0;
    DiskFile f;
  };

  std::string name_of(uint64_t key) const {
    char k[20];
    std::snprintf(k, sizeof k, "%016llx", (unsigned long long)key);
    return prefix_ + k + kDiskSuffix;
  }
  std::string path_of(uint64_t key) const { return dir_ + "/" + name_of(key); }
  uint64_t file_bytes(uint32_t n) const { return sizeof(DiskFile) + uint64_t(n) * c_.Bt_; }

  bool valid(const DiskFile& f) const {
    return f.magic == kDiskMagic && f.format == kDiskFormat && f.block_tokens == PromptCache::kBlockTokens &&
           f.token_bytes == c_.Bt_ && f.ns_hi == ns_hi_ && f.ns_lo == ns_lo_ && f.n >= 1 &&
           f.n <= PromptCache::kBlockTokens && f.pos % PromptCache::kBlockTokens == 0 &&
           (f.pos == 0) == (f.parent == ns_lo_) && f.head_sum == disk_head_sum(f);
  }

  void add(const DiskFile& f, uint64_t stamp) {  // mu_ held
    Entry e;
    e.parent = f.parent;
    e.pos = f.pos;
    e.n = f.n;
    std::memcpy(e.tokens.data(), f.tokens, sizeof f.tokens);
    e.stamp = stamp;
    e.bytes = file_bytes(f.n);
    if (!entries_.emplace(f.key, e).second) return;
    kids_[f.parent].push_back(f.key);
    bytes_ += e.bytes;
  }

  void forget(uint64_t key, bool bad) {
    std::lock_guard<std::mutex> lk(mu_);
    if (bad) rejected_++;
    drop_locked(key);
  }

  void drop_locked(uint64_t key) {  // mu_ held; removes the file and the entry
    auto it = entries_.find(key);
    if (it == entries_.end()) return;
    auto kit = kids_.find(it->second.parent);
    if (kit != kids_.end()) {
      auto& v = kit->second;
      v.erase(std::remove(v.begin(), v.end(), key), v.end());
      if (v.empty()) kids_.erase(kit);
    }
    bytes_ -= it->second.bytes;
    entries_.erase(it);
    unlink(path_of(key).c_str());
  }

  // Oldest first; among equals the deepest (a child before its parent).
  bool evict_one() {  // mu_ held
    const std::pair<const uint64_t, Entry>* victim = nullptr;
    for (const auto& kv : entries_)
      if (!victim || kv.second.stamp < victim->second.stamp ||
          (kv.second.stamp == victim->second.stamp && kv.second.pos > victim->second.pos))
        victim = &kv;
    if (!victim) return false;
    drop_locked(victim->first);
    evictions_++;
    return true;
  }

  // Start-up: index this namespace's files by their headers, remove torn or foreign ones and the
  // temporary files of writers no longer running; other namespaces' files are left in place.
  struct OtherFile {
    double mtime;
    std::string path;
    uint64_t bytes;
  };
  void scan() {
    DIR* d = opendir(dir_.c_str());
    if (!d) {
      std::fprintf(stderr, "mashbox: prompt cache dir %s cannot be read (%s); the disk tier starts empty\n", dir_.c_str(), std::strerror(errno));
      return;
    }
    struct Found { double mtime; DiskFile f; };
    std::vector<Found> found;
    std::vector<OtherFile> others;  // block files of other namespaces
    int64_t removed = 0;
    while (dirent* de = readdir(d)) {
      const std::string name = de->d_name;
      const std::string path = dir_ + "/" + name;
      if (name.size() > 4 && name[0] == '.' && name.compare(name.size() - 4, 4, ".tmp") == 0) {
        // .<name>.<pid>.<seq>.tmp
        const size_t b = name.find(kDiskSuffix);
        if (b != std::string::npos && pid_gone(std::strtol(name.c_str() + b + std::strlen(kDiskSuffix) + 1, nullptr, 10)))
          unlink(path.c_str());
        continue;
      }
      const size_t sl = std::strlen(kDiskSuffix);
      if (name.size() <= sl || name.compare(name.size() - sl, sl, kDiskSuffix) != 0) continue;
      if (name.compare(0, prefix_.size(), prefix_) != 0) {
        struct stat st;
        if (stat(path.c_str(), &st) == 0)
          others.push_back({double(st.st_mtim.tv_sec) + st.st_mtim.tv_nsec * 1e-9, path, uint64_t(st.st_size)});
        continue;
      }
      DiskFile f;
      struct stat st;
      const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
      bool ok = fd >= 0 && fstat(fd, &st) == 0 && pread(fd, &f, sizeof f, 0) == ssize_t(sizeof f) && valid(f) &&
                name == name_of(f.key) && uint64_t(st.st_size) == file_bytes(f.n);
      if (fd >= 0) close(fd);
      if (!ok) {
        if (unlink(path.c_str()) == 0) removed++;
        continue;
      }
      found.push_back({double(st.st_mtim.tv_sec) + st.st_mtim.tv_nsec * 1e-9, f});
    }
    closedir(d);
    std::sort(found.begin(), found.end(), [](const Found& a, const Found& b) { return a.mtime < b.mtime; });
    std::lock_guard<std::mutex> lk(mu_);
    for (const auto& x : found) add(x.f, ++clock_);
    rejected_ += removed;
    while (bytes_ > cap_ && evict_one()) {
    }
    if (removed > 0)
      std::fprintf(stderr, "mashbox: prompt cache dir %s: removed %lld torn or foreign block files\n", dir_.c_str(), (long long)removed);
    trim_others(others);
  }

  // The cap holds for the directory, not only for this namespace: every model, version or
  // kernel set served from it is a namespace of its own, so without this the default directory
  // would grow by a cap's worth per model ever served. Other namespaces' files go oldest first,
  // and only those older than kOtherNamespaceGraceSec: a server running now writes its blocks as
  // it goes, and one whose file is removed under it only misses that block (read() forgets it).
  static constexpr double kOtherNamespaceGraceSec = 3600;
  void trim_others(std::vector<OtherFile>& others) {
    uint64_t total = bytes_;
    for (const auto& o : others) total += o.bytes;
    std::sort(others.begin(), others.end(), [](const OtherFile& a, const OtherFile& b) { return a.mtime < b.mtime; });
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    const double old_before = double(now.tv_sec) - kOtherNamespaceGraceSec;
    int64_t trimmed = 0;
    uint64_t trimmed_bytes = 0;
    for (const auto& o : others) {
      if (total <= cap_ || o.mtime > old_before) break;
      if (unlink(o.path.c_str()) != 0) continue;
      total -= o.bytes;
      trimmed++;
      trimmed_bytes += o.bytes;
    }
    if (trimmed > 0)
      std::fprintf(stderr, "mashbox: prompt cache dir %s: removed %lld block files (%.1f MiB) of other namespaces, the oldest, to keep the directory under --cache-disk\n",
                   dir_.c_str(), (long long)trimmed, double(trimmed_bytes) / (1 << 20));
    if (size_t(trimmed) < others.size())
      std::fprintf(stderr, "mashbox: prompt cache dir %s also holds %lld block files of other namespaces (%s)\n", dir_.c_str(),
                   (long long)(others.size() - size_t(trimmed)),
                   total > cap_ ? "written in the last hour, so left in place though over --cache-disk" : "within --cache-disk");
  }

  void run() {
    std::unique_lock<std::mutex> lk(mu_);
    for (;;) {
      cv_.wait(lk, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, and drained
      Job j = queue_.front();
      queue_.pop_front();
      writing_ = true;
      const uint64_t need = file_bytes(j.f.n);
      bool room = need <= cap_;
      while (room && bytes_ + need > cap_) room = evict_one();
      lk.unlock();
      int err = 0;
      if (room) err = write_file(j);
      pins_[j.block].store(0, std::memory_order_release);
      lk.lock();
      queued_keys_.erase(j.f.key);
      if (room && err == 0) {
        add(j.f, ++clock_);
        written_++;
      } else if (err != 0) {
        write_errors_++;
        if (err != last_errno_)
          std::fprintf(stderr, "mashbox: prompt cache dir %s cannot be written (%s); blocks stay in host memory only\n", dir_.c_str(), std::strerror(err));
        last_errno_ = err;
      }
      writing_ = false;
      if (queue_.empty()) idle_cv_.notify_all();
    }
  }

  // Read-ahead: the OS reads the files in the background (POSIX_FADV_WILLNEED), so the
  // scheduler's read at admission finds them in the page cache.
  void read_ahead() {
    std::unique_lock<std::mutex> lk(mu_);
    for (;;) {
      ra_cv_.wait(lk, [&] { return stop_ || !ra_keys_.empty(); });
      if (stop_) return;
      std::vector<uint64_t> keys;
      keys.swap(ra_keys_);
      lk.unlock();
      for (uint64_t k : keys) {
        const int fd = open(path_of(k).c_str(), O_RDONLY | O_CLOEXEC);
        if (fd < 0) continue;
        posix_fadvise(fd, 0, 0, POSIX_FADV_WILLNEED);
        close(fd);
      }
      lk.lock();
    }
  }

  // Through a temporary file of this writer's own and an atomic rename: a reader sees a whole
  // file or none. Returns 0 or the errno.
  int write_file(Job& j) {
    j.f.magic = kDiskMagic;
    j.f.format = kDiskFormat;
    j.f.block_tokens = PromptCache::kBlockTokens;
    j.f.token_bytes = c_.Bt_;
    j.f.ns_hi = ns_hi_;
    j.f.ns_lo = ns_lo_;
    j.f.head_sum = disk_head_sum(j.f);
    const std::string name = name_of(j.f.key);
    const std::string tmp = dir_ + "/." + name + "." + std::to_string(getpid()) + "." + std::to_string(++seq_) + ".tmp";
    const int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) return errno ? errno : EIO;
    int err = 0;
    auto put = [&](const void* p, size_t n) {
      const uint8_t* b = static_cast<const uint8_t*>(p);
      while (n > 0 && err == 0) {
        const ssize_t w = ::write(fd, b, n);
        if (w < 0) {
          if (errno != EINTR) err = errno;
          continue;
        }
        b += w;
        n -= size_t(w);
      }
    };
    put(&j.f, sizeof j.f);
    put(c_.data(j.block), size_t(j.f.n) * c_.Bt_);
    if (close(fd) != 0 && err == 0) err = errno;
    if (err == 0 && rename(tmp.c_str(), (dir_ + "/" + name).c_str()) != 0) err = errno;
    if (err != 0) unlink(tmp.c_str());
    return err;
  }

  PromptCache& c_;
  const std::string dir_;
  const uint64_t cap_;
  const uint64_t ns_hi_, ns_lo_;
  std::string prefix_;
  std::unique_ptr<std::atomic<uint8_t>[]> pins_;  // [M] 1 while the writer may still read the block
  size_t max_queued_ = 1;

  mutable std::mutex mu_;  // everything below
  std::condition_variable cv_, idle_cv_, ra_cv_;
  std::vector<uint64_t> ra_keys_;  // files the reader thread is to read ahead
  std::deque<Job> queue_;
  std::unordered_set<uint64_t> queued_keys_;
  std::unordered_map<uint64_t, Entry> entries_;              // key -> block file
  std::unordered_map<uint64_t, std::vector<uint64_t>> kids_;  // parent key -> keys
  uint64_t bytes_ = 0, clock_ = 0, seq_ = 0;
  int64_t evictions_ = 0, rejected_ = 0, written_ = 0, write_errors_ = 0;
  std::atomic<int64_t> hit_tokens_{0};
  int last_errno_ = 0;
  bool stop_ = false, writing_ = false, logged_behind_ = false;
  std::thread writer_, reader_;
};

PromptCache::PromptCache(const std::string& path, uint64_t cap_bytes, size_t token_bytes, const std::string& ns,
                         const PromptCacheDisk& disk)
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
  if (!disk.dir.empty() && disk.cap_bytes > 0) disk_ = std::make_unique<DiskTier>(*this, disk, ns_hi);
}

PromptCache::~PromptCache() {
  disk_.reset();  // drains the writes, which read the blocks below
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
  if (index_on_) index_block(i);
}

void PromptCache::index_block(uint32_t i) {
  const int32_t* t = header(i)->tokens;
  // Later offsets overwrite earlier ones: the latest occurrence predicts best, as in the history.
  for (uint32_t o = 0; o + kDraftGram <= meta_[i].n; o++) grams_[gram_hash(t + o)] = uint64_t(i) << 32 | o;
}

void PromptCache::unindex_block(uint32_t i) {
  const int32_t* t = header(i)->tokens;
  for (uint32_t o = 0; o + kDraftGram <= meta_[i].n; o++) {
    auto it = grams_.find(gram_hash(t + o));
    // A newer block may have taken the m-gram over: its entry stays.
    if (it != grams_.end() && it->second == (uint64_t(i) << 32 | o)) grams_.erase(it);
  }
}

void PromptCache::index_drafts() {
  if (index_on_ || !enabled()) return;
  index_on_ = true;
  std::vector<uint32_t> held;
  for (uint32_t i = 0; i < n_blocks_; i++)
    if (meta_[i].used) held.push_back(i);
  // Oldest first, so that where two blocks share an m-gram the more recently used one keeps it.
  std::stable_sort(held.begin(), held.end(), [&](uint32_t a, uint32_t b) { return meta_[a].stamp < meta_[b].stamp; });
  for (uint32_t i : held) index_block(i);
}

size_t PromptCache::continuation(const int32_t* hist, size_t n, size_t min_match, int32_t* out, size_t max) const {
  constexpr size_t m = kDraftGram;
  if (!index_on_ || max == 0 || n < m) return 0;
  const int32_t* g = hist + n - m;
  auto it = grams_.find(gram_hash(g));
  if (it == grams_.end()) return 0;
  uint32_t b = uint32_t(it->second >> 32);
  const uint32_t off = uint32_t(it->second);
  if (b >= n_blocks_ || !meta_[b].used || size_t(off) + m > meta_[b].n) return 0;
  const int32_t* t = header(b)->tokens;
  if (!std::equal(g, g + m, t + off)) return 0;  // a hash collision
  size_t matched = m;
  while (matched < min_match && matched - m < off && matched < n && t[off - (matched - m) - 1] == hist[n - matched - 1]) matched++;
  if (matched < min_match) return 0;
  size_t got = 0, at = size_t(off) + m;
  while (got < max) {
    const Meta& bm = meta_[b];
    if (at < bm.n) {
      out[got++] = header(b)->tokens[at++];
      continue;
    }
    if (bm.n < kBlockTokens) break;  // a leaf: the prompt ended here
    auto kids = children_.find(bm.key);
    if (kids == children_.end()) break;
    int64_t next = -1;
    for (uint32_t c : kids->second)
      if (meta_[c].used && meta_[c].pos == bm.pos + kBlockTokens && (next < 0 || meta_[c].stamp > meta_[next].stamp)) next = c;
    if (next < 0) break;
    b = uint32_t(next);
    at = 0;
  }
  return got;
}

void PromptCache::touch(uint32_t i, uint64_t stamp) {
  meta_[i].stamp = stamp;
  header(i)->stamp = stamp;
}

void PromptCache::free_block(uint32_t i, bool eviction) {
  Meta& m = meta_[i];
  if (!m.used) return;
  if (index_on_) unindex_block(i);
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

bool PromptCache::pinned(uint32_t i) const { return disk_ && disk_->pinned(i); }

int64_t PromptCache::alloc(uint64_t protect_stamp) {
  // A block the disk writer still reads is neither reused nor evicted until its file is written.
  for (size_t k = free_.size(); k-- > 0;)
    if (!pinned(free_[k])) {
      const uint32_t b = free_[k];
      free_[k] = free_.back();
      free_.pop_back();
      return b;
    }
  // Oldest first; among equals the deepest, which is a leaf (see the header).
  int64_t victim = -1;
  for (uint32_t i = 0; i < n_blocks_; i++) {
    const Meta& m = meta_[i];
    if (!m.used || m.stamp >= protect_stamp || pinned(i)) continue;
    if (victim < 0 || m.stamp < meta_[victim].stamp || (m.stamp == meta_[victim].stamp && m.pos > meta_[victim].pos))
      victim = i;
  }
  if (victim < 0) return -1;
  free_block(uint32_t(victim), true);
  // free_block pushed the victim last (after what hung below it)
  const uint32_t b = free_.back();
  free_.pop_back();
  return b;
}

int64_t PromptCache::import_from_disk(uint64_t parent, size_t pos, const int32_t* tokens, size_t n, size_t than, uint64_t stamp) {
  DiskTier::Found f;
  if (!disk_->best_child(parent, uint32_t(pos), tokens, n, than, f)) return -1;
  const int64_t got = alloc(stamp);
  if (got < 0) return -1;
  const uint32_t b = uint32_t(got);
  Header* h = header(b);
  __atomic_store_n(&h->magic, 0, __ATOMIC_RELEASE);
  DiskFile df;
  if (!disk_->read(f.key, df, data(b))) {
    free_.push_back(b);
    return -1;
  }
  std::memcpy(h->tokens, df.tokens, sizeof h->tokens);
  h->ns = ns_hash_;
  h->key = df.key;
  h->parent = df.parent;
  h->pos = df.pos;
  h->n = df.n;
  h->stamp = stamp;
  if (block_checksum(b) != df.data_sum) {
    disk_->reject(f.key, "corrupt");
    free_.push_back(b);
    return -1;
  }
  h->data_sum = df.data_sum;
  h->head_sum = header_checksum(*h);
  __atomic_store_n(&h->magic, kUsed, __ATOMIC_RELEASE);
  meta_[b] = Meta{true, h->key, h->parent, h->pos, h->n, stamp};
  link(b);
  return b;
}

void PromptCache::flush_disk() {
  if (disk_) disk_->flush();
}

size_t PromptCache::prefetch_disk(const int32_t* tokens, size_t n) { return disk_ ? disk_->prefetch(tokens, n) : 0; }

int64_t PromptCache::held_child(uint64_t parent, const int32_t* tokens, size_t left, size_t* len) const {
  int64_t best = -1;
  size_t best_l = 0;
  auto it = children_.find(parent);
  if (it != children_.end())
    for (uint32_t c : it->second) {
      const Header* h = header(c);
      const size_t lim = std::min<size_t>(meta_[c].n, left);
      size_t l = 0;
      while (l < lim && h->tokens[l] == tokens[l]) l++;
      if (l > best_l || (l == best_l && l > 0 && meta_[c].n > meta_[best].n)) {
        best = c;
        best_l = l;
      }
    }
  *len = best_l;
  return best;
}

size_t PromptCache::known(const int32_t* tokens, size_t n) const {
  if (!enabled()) return 0;
  uint64_t parent = ns_hash_;
  size_t pos = 0, end = 0;
  while (pos < n) {
    size_t best_l = 0;
    int64_t best = held_child(parent, tokens + pos, n - pos, &best_l);
    // Where host memory stops (or holds a shorter block), the disk tier's index may go on.
    if (disk_ && best_l < kBlockTokens && best_l < n - pos) {
      size_t disk_end = pos;
      disk_->walk(parent, pos, tokens, n, &disk_end);
      return std::max(pos + best_l, disk_end);
    }
    if (best < 0) break;
    end = pos + best_l;
    if (best_l < kBlockTokens) break;
    parent = meta_[best].key;
    pos += kBlockTokens;
  }
  return end;
}

PromptCache::Match PromptCache::lookup(const int32_t* tokens, size_t n) {
  Match m;
  if (!enabled()) return m;
  const uint64_t stamp = ++clock_;
  uint64_t parent = ns_hash_;
  size_t pos = 0;
  while (pos < n) {
    size_t best_l = 0;
    int64_t best = held_child(parent, tokens + pos, n - pos, &best_l);
    // Past what host memory holds (or a longer block than it has): the disk tier's block is read
    // into host memory, so the restore below finds everything there.
    if (best >= 0) touch(uint32_t(best), stamp);  // kept while a disk block is made room for
    if (disk_ && best_l < kBlockTokens && best_l < n - pos) {
      const int64_t d = import_from_disk(parent, pos, tokens + pos, n - pos, best_l, stamp);
      if (d >= 0) {
        best = d;
        const size_t lim = std::min<size_t>(meta_[d].n, n - pos);
        best_l = 0;
        while (best_l < lim && header(uint32_t(d))->tokens[best_l] == tokens[pos + best_l]) best_l++;
      }
    } else if (disk_ && best >= 0) {
      disk_->touch(meta_[best].key);
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
    if (disk_) disk_->enqueue(b, *h);
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
  if (disk_) disk_->fill(s);
  return s;
}

}  // namespace mb
