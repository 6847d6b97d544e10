// The host prompt cache's store on its own: prefix sharing (each copy once), lookups that end
// inside a block, state points replaced by the full block, LRU under the cap, the namespace,
// persistence through the file, and checksums that refuse a corrupted block; the disk tier:
// written behind, read back by a new cache of the same namespace, evicted under its cap, torn
// and foreign files removed, another namespace's files left alone, an unwritable directory.
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <string>
#include <vector>

#include "../prompt_cache.h"
#include "../../util/tests/check.h"

using namespace mb;

static constexpr size_t kBt = 24;  // bytes of "K/V" per token
static constexpr uint32_t N = PromptCache::kBlockTokens;

// What a model would hold for token t at position p: depends on both, so a restore into the wrong
// place or from the wrong prompt shows.
static uint8_t kv_byte(int32_t t, size_t p, size_t j) {
  uint64_t h = (uint64_t(uint32_t(t)) << 32 | p) * 0x9E3779B97F4A7C15ull;
  h ^= h >> 29;
  return uint8_t((h >> (8 * (j % 8))) + j);
}

struct FakeSlot {
  std::vector<int32_t> tokens;
  PromptCache::Reader reader() const {
    return [this](size_t pos, size_t count, uint8_t* dst) {
      for (size_t i = 0; i < count; i++)
        for (size_t j = 0; j < kBt; j++) *dst++ = kv_byte(tokens[pos + i], pos + i, j);
    };
  }
};

static std::vector<int32_t> seq(int32_t seed, size_t n) {
  std::vector<int32_t> v(n);
  uint32_t x = uint32_t(seed) * 2654435761u + 1;
  for (auto& t : v) {
    x = x * 1664525u + 1013904223u;
    t = int32_t(x >> 16) % 5000;
  }
  return v;
}

static void save(PromptCache& c, const std::vector<int32_t>& p, size_t n) {
  FakeSlot s{p};
  c.save(p.data(), n, s.reader());
}

// Restores [from, upto) of prompt p and checks every byte; returns the end restored.
static size_t restore_checked(PromptCache& c, const std::vector<int32_t>& p, size_t from, size_t upto, bool* bytes_ok) {
  auto m = c.lookup(p.data(), p.size());
  size_t expect_next = from;
  *bytes_ok = true;
  const size_t end = c.restore(m, from, upto, [&](size_t pos, size_t count, const uint8_t* b) {
    if (pos != expect_next) *bytes_ok = false;
    for (size_t i = 0; i < count; i++)
      for (size_t j = 0; j < kBt; j++)
        if (b[i * kBt + j] != kv_byte(p[pos + i], pos + i, j)) *bytes_ok = false;
    expect_next = pos + count;
  });
  return end;
}

static uint64_t cap_for_blocks(size_t blocks) {
  // header (a few hundred bytes) + data per block, plus the file's two pages of alignment
  return uint64_t(blocks) * (N * kBt + 64 + N * 4) + 2 * 4096;
}

static void test_sharing_and_partial_matches() {
  PromptCache c("", 64ull << 20, kBt, "ns-a");
  CHECK(c.enabled());
  auto a = seq(1, 200);
  save(c, a, a.size());
  auto st = c.stats();
  CHECK_EQ(st.tokens, int64_t(200));
  CHECK_EQ(st.blocks, int64_t(4));  // 3 full + the 8-token tail
  bool ok = false;
  CHECK_EQ(restore_checked(c, a, 0, a.size(), &ok), size_t(200));
  CHECK(ok);

  // b shares a's first 150 tokens: the two full blocks before the split are stored once.
  auto b = a;
  b.resize(250);
  auto tail = seq(2, 100);
  for (size_t i = 150; i < 250; i++) b[i] = tail[i - 150];
  save(c, b, b.size());
  st = c.stats();
  CHECK_EQ(st.blocks, int64_t(6));
  CHECK_EQ(st.tokens, int64_t(200 + 64 + 58));
  CHECK_EQ(st.bytes, st.blocks * int64_t(64 + N * 4 + N * kBt));

  // A prompt that leaves both after 170 tokens matches into the middle of a block.
  auto q = b;
  q.resize(180);
  q[170] = 4999;
  CHECK_EQ(c.known(q.data(), q.size()), size_t(170));
  auto m = c.lookup(q.data(), q.size());
  CHECK_EQ(m.n, size_t(170));
  CHECK_EQ(restore_checked(c, q, 0, 170, &ok), size_t(170));
  CHECK(ok);
  // A restore may start where the slot's own prefix ends.
  CHECK_EQ(restore_checked(c, q, 100, 170, &ok), size_t(170));
  CHECK(ok);

  // Nothing in common: nothing matched.
  auto z = seq(3, 100);
  CHECK_EQ(c.lookup(z.data(), z.size()).n, size_t(0));
  CHECK_EQ(c.known(z.data(), z.size()), size_t(0));
}

static void test_state_point_replaced_by_full_block() {
  PromptCache c("", 64ull << 20, kBt, "ns-a");
  auto p = seq(4, 300);
  save(c, p, 100);  // a state point: one full block and a 36-token leaf
  CHECK_EQ(c.stats().blocks, int64_t(2));
  CHECK_EQ(c.lookup(p.data(), p.size()).n, size_t(100));
  save(c, p, 300);  // the whole prompt later: the leaf is covered by a full block and goes
  auto st = c.stats();
  CHECK_EQ(st.blocks, int64_t(5));
  CHECK_EQ(st.tokens, int64_t(300));
  CHECK_EQ(st.evictions, int64_t(0));
  // Saving the state point again finds it inside the full block: nothing new is stored.
  save(c, p, 100);
  CHECK_EQ(c.stats().blocks, int64_t(5));
  CHECK_EQ(c.stats().saved_tokens, int64_t(100 + 236));
}

static void test_lru_under_cap() {
  const uint64_t cap = cap_for_blocks(10);
  PromptCache c("", cap, kBt, "ns-a");
  CHECK(c.enabled());
  auto sys = seq(5, 128);  // a shared system prompt: two full blocks
  std::vector<std::vector<int32_t>> sessions;
  for (int i = 0; i < 20; i++) {
    auto p = sys;
    auto own = seq(100 + i, 70);
    p.insert(p.end(), own.begin(), own.end());
    sessions.push_back(p);
    save(c, p, p.size());
    // the system prompt is in use by every session: it must survive
    CHECK_EQ(c.lookup(sys.data(), sys.size()).n, size_t(128));
    auto st = c.stats();
    CHECK(st.bytes <= int64_t(cap));
    CHECK(st.blocks <= 10);
  }
  auto st = c.stats();
  CHECK(st.evictions > 0);
  // Each session costs two blocks of its own (64 + 6 tokens) on top of the shared two.
  CHECK_EQ(st.blocks, int64_t(10));
  CHECK_EQ(c.lookup(sessions[19].data(), sessions[19].size()).n, sessions[19].size());
  CHECK_EQ(c.lookup(sessions[0].data(), sessions[0].size()).n, size_t(128));
  // A session touched recently outlives older ones.
  c.lookup(sessions[16].data(), sessions[16].size());
  // An estimate is no use: session 17 is still the older one, evicted below.
  CHECK_EQ(c.known(sessions[17].data(), sessions[17].size()), sessions[17].size());
  for (int i = 0; i < 3; i++) {
    auto p = sys;
    auto own = seq(200 + i, 70);
    p.insert(p.end(), own.begin(), own.end());
    save(c, p, p.size());
  }
  CHECK_EQ(c.lookup(sessions[16].data(), sessions[16].size()).n, sessions[16].size());
  CHECK_EQ(c.lookup(sessions[17].data(), sessions[17].size()).n, size_t(128));
  // A prompt longer than the whole cache keeps what fits instead of evicting itself.
  auto huge = seq(7, 64 * 15);
  save(c, huge, huge.size());
  CHECK(c.stats().bytes <= int64_t(cap));
  CHECK(c.lookup(huge.data(), huge.size()).n >= size_t(64));
}

static std::string tmp_path(const char* tag) {
  return "/tmp/mb_test_prompt_cache_" + std::string(tag) + "_" + std::to_string(getpid());
}

static void test_file_namespace_and_checksum() {
  const std::string path = tmp_path("file");
  unlink(path.c_str());
  auto p = seq(8, 150);
  {
    PromptCache c(path, 16ull << 20, kBt, "model-a");
    CHECK(c.stats().persistent);
    save(c, p, p.size());
    // A second process on the same file while the first holds it gets private memory.
    PromptCache other(path, 16ull << 20, kBt, "model-a");
    CHECK(!other.stats().persistent);
    CHECK_EQ(other.lookup(p.data(), p.size()).n, size_t(0));
  }
  std::string ns_a;
  {
    PromptCache c(path, 16ull << 20, kBt, "model-a");  // a restarted worker
    ns_a = c.namespace_id();
    CHECK_EQ(c.stats().blocks, int64_t(3));
    bool ok = false;
    CHECK_EQ(restore_checked(c, p, 0, p.size(), &ok), size_t(150));
    CHECK(ok);
  }
  {
    PromptCache c(path, 16ull << 20, kBt, "model-b");  // another template / model: never restored
    CHECK(c.namespace_id() != ns_a);
    CHECK_EQ(c.stats().blocks, int64_t(0));
    CHECK_EQ(c.lookup(p.data(), p.size()).n, size_t(0));
  }
  {
    PromptCache c(path, 16ull << 20, kBt + 2, "model-a");  // another KV layout: the same
    CHECK_EQ(c.lookup(p.data(), p.size()).n, size_t(0));
  }
  {
    PromptCache c(path, 16ull << 20, kBt, "model-a");
    save(c, p, p.size());
  }
  // Flip one byte of K/V in the second block: the restore stops before it.
  {
    int fd = open(path.c_str(), O_RDWR);
    CHECK(fd >= 0);
    // the data area starts on the page after the headers; find the second block's bytes by value
    std::vector<uint8_t> want(kBt);
    for (size_t j = 0; j < kBt; j++) want[j] = kv_byte(p[70], 70, j);
    off_t size = lseek(fd, 0, SEEK_END);
    std::vector<uint8_t> all(static_cast<size_t>(size));
    CHECK_EQ(pread(fd, all.data(), all.size(), 0), ssize_t(size));
    auto it = std::search(all.begin(), all.end(), want.begin(), want.end());
    CHECK(it != all.end());
    uint8_t x = uint8_t(*it ^ 0xff);
    CHECK_EQ(pwrite(fd, &x, 1, off_t(it - all.begin())), ssize_t(1));
    close(fd);
  }
  {
    PromptCache c(path, 16ull << 20, kBt, "model-a");
    bool ok = false;
    CHECK_EQ(restore_checked(c, p, 0, p.size(), &ok), size_t(64));
    CHECK(ok);
    CHECK(c.stats().rejected >= 1);
    CHECK_EQ(c.lookup(p.data(), p.size()).n, size_t(64));
  }
  unlink(path.c_str());
}

static void test_counters_survive_reopen() {
  const std::string path = tmp_path("counters");
  unlink(path.c_str());
  int64_t evictions = 0;
  {
    PromptCache c(path, cap_for_blocks(4), kBt, "ns");
    for (int i = 0; i < 6; i++) save(c, seq(300 + i, 100), 100);
    evictions = c.stats().evictions;
    CHECK(evictions > 0);
  }
  {
    PromptCache c(path, cap_for_blocks(4), kBt, "ns");
    CHECK_EQ(c.stats().evictions, evictions);
    CHECK_EQ(c.stats().blocks, int64_t(4));
  }
  unlink(path.c_str());
}

static void test_off() {
  PromptCache none("", 0, kBt, "x");
  CHECK(!none.enabled());
  auto p = seq(9, 100);
  save(none, p, p.size());
  CHECK_EQ(none.lookup(p.data(), p.size()).n, size_t(0));
  CHECK_EQ(none.stats().cap_bytes, int64_t(0));
  PromptCache tiny("", 1000, kBt, "x");  // less than one block
  CHECK(!tiny.enabled());
}

static std::vector<std::string> dir_files(const std::string& dir) {
  std::vector<std::string> out;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d))
      if (e->d_name[0] != '.') out.push_back(e->d_name);
    closedir(d);
  }
  std::sort(out.begin(), out.end());
  return out;
}

static void rm_dir(const std::string& dir) {
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d))
      if (std::strcmp(e->d_name, ".") && std::strcmp(e->d_name, "..")) unlink((dir + "/" + e->d_name).c_str());
    closedir(d);
  }
  rmdir(dir.c_str());
}

static void test_disk_tier() {
  const std::string dir = tmp_path("disk");
  rm_dir(dir);
  const PromptCacheDisk disk{dir, 64ull << 20};
  auto a = seq(20, 200), b = seq(21, 130);
  std::string ns;
  {
    PromptCache c("", 16ull << 20, kBt, "ns-disk", disk);
    ns = c.namespace_id();
    save(c, a, a.size());  // 3 full blocks and a tail
    save(c, b, b.size());
    c.flush_disk();
    const auto st = c.stats();
    CHECK_EQ(st.disk_written, int64_t(4 + 3));
    CHECK_EQ(st.disk_blocks, int64_t(7));
    CHECK(st.disk_bytes > int64_t((5 * N + 8 + 2) * kBt));
    CHECK_EQ(st.disk_cap_bytes, int64_t(64ull << 20));
    CHECK_EQ(dir_files(dir).size(), size_t(7));
    // Saved again: the files are there already.
    save(c, a, a.size());
    c.flush_disk();
    CHECK_EQ(c.stats().disk_written, int64_t(7));
  }
  CHECK_EQ(dir_files(dir).size(), size_t(7));
  {
    // A new server (private host memory: nothing survives there) reads them back on lookup.
    PromptCache c("", 16ull << 20, kBt, "ns-disk", disk);
    CHECK_EQ(c.stats().blocks, int64_t(0));
    CHECK_EQ(c.stats().disk_blocks, int64_t(7));
    // Read-ahead asks for a's whole path (3 full blocks and its tail), for another prompt none.
    CHECK_EQ(c.prefetch_disk(a.data(), a.size()), size_t(4));
    CHECK_EQ(c.prefetch_disk(seq(99, 100).data(), 100), size_t(0));
    // The estimate sees what lookup would find on disk, without reading a file or filling a block.
    CHECK_EQ(c.known(a.data(), a.size()), size_t(200));
    CHECK_EQ(c.known(b.data(), b.size()), size_t(130));
    auto a1 = a;
    a1[150] = 4999;
    CHECK_EQ(c.known(a1.data(), a1.size()), size_t(150));
    CHECK_EQ(c.known(seq(99, 100).data(), 100), size_t(0));
    CHECK_EQ(c.stats().disk_hit_tokens, int64_t(0));
    CHECK_EQ(c.stats().blocks, int64_t(0));
    bool ok = false;
    CHECK_EQ(restore_checked(c, a, 0, a.size(), &ok), size_t(200));
    CHECK(ok);
    CHECK_EQ(c.stats().disk_hit_tokens, int64_t(200));
    CHECK_EQ(c.known(a.data(), a.size()), size_t(200));  // now from host memory
    CHECK_EQ(c.known(a1.data(), a1.size()), size_t(150));
    CHECK_EQ(restore_checked(c, b, 0, b.size(), &ok), size_t(130));
    CHECK(ok);
    // A prompt that shares a's first block, then goes its own way.
    auto a2 = a;
    a2.resize(100);
    for (size_t i = 64; i < a2.size(); i++) a2[i] = 4999;
    CHECK_EQ(c.lookup(a2.data(), a2.size()).n, size_t(64));
    // Another namespace does not see them.
    PromptCache other("", 16ull << 20, kBt, "ns-other", disk);
    CHECK_EQ(other.lookup(a.data(), a.size()).n, size_t(0));
    CHECK_EQ(other.stats().disk_blocks, int64_t(0));
  }
  const std::string prefix = ns.substr(0, 16) + "-";
  auto files = dir_files(dir);
  CHECK_EQ(files.size(), size_t(7));
  std::vector<std::string> ours;
  for (const auto& f : files)
    if (f.compare(0, prefix.size(), prefix) == 0) ours.push_back(f);
  CHECK_EQ(ours.size(), size_t(7));
  {
    // Tear one file (cut short), make one foreign (another namespace's header under this one's
    // name), corrupt one's K/V (found only when it is read), and leave another namespace's file.
    auto size_of = [&](const std::string& f) {
      struct stat st;
      stat((dir + "/" + f).c_str(), &st);
      return off_t(st.st_size);
    };
    CHECK_EQ(truncate((dir + "/" + ours[0]).c_str(), size_of(ours[0]) - 10), 0);
    int fd = open((dir + "/" + ours[1]).c_str(), O_RDWR);
    uint8_t x = 0;
    CHECK_EQ(pread(fd, &x, 1, 24), ssize_t(1));  // the namespace's first byte
    x ^= 0x5a;
    CHECK_EQ(pwrite(fd, &x, 1, 24), ssize_t(1));
    close(fd);
    fd = open((dir + "/" + ours[2]).c_str(), O_RDWR);
    CHECK_EQ(pread(fd, &x, 1, size_of(ours[2]) - 1), ssize_t(1));
    x ^= 0xff;
    CHECK_EQ(pwrite(fd, &x, 1, size_of(ours[2]) - 1), ssize_t(1));
    close(fd);
    fd = open((dir + "/0123456789abcdef-0000000000000001.mbkv").c_str(), O_WRONLY | O_CREAT, 0600);
    CHECK_EQ(write(fd, "not ours", 8), ssize_t(8));
    close(fd);
  }
  {
    PromptCache c("", 16ull << 20, kBt, "ns-disk", disk);
    CHECK_EQ(c.stats().disk_rejected, int64_t(2));
    CHECK_EQ(c.stats().disk_blocks, int64_t(5));
    auto left = dir_files(dir);
    CHECK(std::find(left.begin(), left.end(), ours[0]) == left.end());
    CHECK(std::find(left.begin(), left.end(), ours[1]) == left.end());
    CHECK(std::find(left.begin(), left.end(), "0123456789abcdef-0000000000000001.mbkv") != left.end());
    // Whatever is read back is whole: the corrupt block and what hangs below it are not used.
    bool ok = false;
    const size_t got_a = restore_checked(c, a, 0, a.size(), &ok);
    CHECK(ok);
    const size_t got_b = restore_checked(c, b, 0, b.size(), &ok);
    CHECK(ok);
    CHECK(got_a < a.size() || got_b < b.size());
    CHECK_EQ(c.stats().disk_rejected, int64_t(3));
    CHECK_EQ(dir_files(dir).size(), size_t(4 + 1));
  }
  {
    // Under a cap of two blocks' files, the oldest go.
    const PromptCacheDisk small{dir, uint64_t(2 * (N * kBt + 512))};
    PromptCache c("", 16ull << 20, kBt, "ns-disk", small);
    CHECK(c.stats().disk_bytes <= int64_t(small.cap_bytes));
    CHECK(c.stats().disk_evictions >= 1);
    save(c, seq(22, 64 * 3), 64 * 3);
    c.flush_disk();
    CHECK(c.stats().disk_bytes <= int64_t(small.cap_bytes));
    CHECK_EQ(c.stats().disk_blocks, int64_t(2));
  }
  rm_dir(dir);
  {
    // A directory that cannot be made or written: the host cache works as without it.
    const PromptCacheDisk bad{"/proc/mb-no-such-dir", 64ull << 20};
    PromptCache c("", 16ull << 20, kBt, "ns-disk", bad);
    save(c, a, a.size());
    c.flush_disk();
    CHECK(c.stats().disk_write_errors >= 1);
    CHECK_EQ(c.stats().disk_blocks, int64_t(0));
    bool ok = false;
    CHECK_EQ(restore_checked(c, a, 0, a.size(), &ok), size_t(200));
    CHECK(ok);
  }
  {
    // The writer still reads a block while host memory fills up: the block is not reused, and
    // every file written holds what was saved (checked by reading all back).
    const std::string dir2 = tmp_path("disk2");
    rm_dir(dir2);
    const PromptCacheDisk d2{dir2, 64ull << 20};
    std::vector<std::vector<int32_t>> ps;
    {
      PromptCache c("", cap_for_blocks(4), kBt, "ns-pin", d2);
      for (int i = 0; i < 12; i++) {
        ps.push_back(seq(400 + i, 128));
        save(c, ps.back(), 128);
      }
    }
    PromptCache c("", 16ull << 20, kBt, "ns-pin", d2);
    CHECK_EQ(c.stats().disk_rejected, int64_t(0));
    int whole = 0;
    for (const auto& p : ps) {
      bool ok = false;
      if (restore_checked(c, p, 0, p.size(), &ok) == p.size()) whole++;
      CHECK(ok);
    }
    CHECK(whole >= 1);
    CHECK_EQ(c.stats().disk_rejected, int64_t(0));
    rm_dir(dir2);
  }
}

// The disk cap holds for the whole directory: another namespace's files (another model served
// from the same directory) are removed oldest first, once they are over an hour old.
static void test_disk_cap_spans_namespaces() {
  const std::string dir = tmp_path("disk3");
  rm_dir(dir);
  {
    PromptCache c("", 16ull << 20, kBt, "ns-a", PromptCacheDisk{dir, 64ull << 20});
    auto a = seq(30, 200);
    save(c, a, a.size());  // 3 full blocks and a tail: 4 files
  }
  auto files = dir_files(dir);
  CHECK_EQ(files.size(), size_t(4));
  const PromptCacheDisk small{dir, uint64_t(2 * (N * kBt + 512))};
  {
    // Written just now: they may be a running server's, so they stay.
    PromptCache c("", 16ull << 20, kBt, "ns-b", small);
    CHECK_EQ(c.stats().disk_blocks, int64_t(0));
  }
  CHECK_EQ(dir_files(dir).size(), size_t(4));
  // Aged two hours and more, file i one minute older than file i - 1.
  struct timespec now;
  clock_gettime(CLOCK_REALTIME, &now);
  for (size_t i = 0; i < files.size(); i++) {
    struct timespec t[2];
    t[0].tv_sec = t[1].tv_sec = now.tv_sec - 7200 - 60 * time_t(i);
    t[0].tv_nsec = t[1].tv_nsec = 0;
    CHECK_EQ(utimensat(AT_FDCWD, (dir + "/" + files[i]).c_str(), t, 0), 0);
  }
  {
    PromptCache c("", 16ull << 20, kBt, "ns-b", small);
    auto left = dir_files(dir);
    uint64_t bytes = 0;
    for (const auto& f : left) {
      struct stat st;
      CHECK_EQ(stat((dir + "/" + f).c_str(), &st), 0);
      bytes += uint64_t(st.st_size);
    }
    CHECK(bytes <= small.cap_bytes);
    CHECK(!left.empty());
    // The youngest stay: files[0] is the youngest.
    CHECK(std::find(left.begin(), left.end(), files[0]) != left.end());
    CHECK(std::find(left.begin(), left.end(), files[3]) == left.end());
    // This namespace's own blocks still get their room.
    save(c, seq(31, 64), 64);
    c.flush_disk();
    CHECK_EQ(c.stats().disk_blocks, int64_t(1));
  }
  rm_dir(dir);
}

// What continuation() drafts after hist, at most max tokens.
static std::vector<int32_t> cont(const PromptCache& c, std::vector<int32_t> hist, size_t max, size_t min_match = PromptCache::kDraftGram) {
  std::vector<int32_t> out(max, -1);
  out.resize(c.continuation(hist.data(), hist.size(), min_match, out.data(), out.size()));
  return out;
}

// hist: some tokens no prompt holds, then p[from, to).
static std::vector<int32_t> tail_of(const std::vector<int32_t>& p, size_t from, size_t to) {
  std::vector<int32_t> h{7001, 7002, 7003};
  h.insert(h.end(), p.begin() + from, p.begin() + to);
  return h;
}

static std::vector<int32_t> slice(const std::vector<int32_t>& p, size_t from, size_t to) {
  return std::vector<int32_t>(p.begin() + from, p.begin() + to);
}

// The draft index: continuations of earlier prompts within a block and across into its child,
// none for an unseen m-gram, at a leaf's end or below the asked match length; entries go with
// evicted blocks and come with blocks read back from the disk tier.
static void test_draft_index() {
  constexpr size_t m = PromptCache::kDraftGram;
  {
    PromptCache c("", 64ull << 20, kBt, "ns-a");
    auto a = seq(30, 150);      // blocks [0, 64) [64, 128) [128, 150)
    save(c, a, 100);            // a partial leaf [64, 100), replaced by the full block below
    CHECK(cont(c, tail_of(a, 10, 13), 8).empty());  // not indexed until asked
    c.index_drafts();           // blocks held before the index was on
    CHECK(cont(c, tail_of(a, 10, 13), 8) == slice(a, 13, 21));
    save(c, a, a.size());
    CHECK_EQ(c.stats().blocks, int64_t(3));
    CHECK(cont(c, tail_of(a, 10, 13), 8) == slice(a, 13, 21));
    // Across the boundary into the full block that replaced the partial one.
    CHECK(cont(c, tail_of(a, 58, 61), 8) == slice(a, 61, 69));
    CHECK(cont(c, tail_of(a, 120, 123), 8) == slice(a, 123, 131));
    // Stops at the end of the prompt (a leaf), and at max.
    CHECK(cont(c, tail_of(a, 140, 143), 8) == slice(a, 143, 150));
    CHECK(cont(c, tail_of(a, 147, 150), 8).empty());
    CHECK(cont(c, tail_of(a, 10, 13), 2) == slice(a, 13, 15));
    CHECK(cont(c, tail_of(a, 10, 13), 0).empty());
    // Unseen m-gram; history shorter than m.
    CHECK(cont(c, {5001, 5002, 5003}, 8).empty());
    CHECK(cont(c, slice(a, 11, 13), 8).empty());
    // A longer match asked for: the tokens before the m-gram must match too, within its block.
    auto h = tail_of(a, 20, 23);
    CHECK(cont(c, h, 4, m + 1).empty());  // 7003 before a[20..23): no
    CHECK(cont(c, slice(a, 15, 23), 4, m + 3) == slice(a, 23, 27));
    CHECK(cont(c, slice(a, 15, 23), 4, m + 5) == slice(a, 23, 27));
    CHECK(cont(c, slice(a, 15, 23), 4, m + 6).empty());  // only 8 tokens of history
    CHECK(cont(c, slice(a, 64, 67), 4, m + 1).empty());  // the m-gram opens its block: nothing to compare
    // A later prompt with the same m-gram and another continuation takes it over.
    auto b = seq(31, 40);
    b.insert(b.end(), a.begin() + 10, a.begin() + 13);
    b.insert(b.end(), {4000, 4001, 4002, 4003});
    save(c, b, b.size());
    CHECK(cont(c, tail_of(a, 10, 13), 8) == std::vector<int32_t>({4000, 4001, 4002, 4003}));
    CHECK(cont(c, tail_of(a, 58, 61), 8) == slice(a, 61, 69));
  }
  {
    // Eviction: the blocks go and so do their drafts; the m-grams of what stays still draft.
    PromptCache c("", cap_for_blocks(4), kBt, "ns-a");
    c.index_drafts();
    auto a = seq(40, 130);
    save(c, a, a.size());
    CHECK(cont(c, tail_of(a, 100, 103), 8) == slice(a, 103, 111));
    for (int i = 0; i < 6; i++) {
      auto o = seq(50 + i, 64);
      save(c, o, o.size());
    }
    CHECK_EQ(c.lookup(a.data(), a.size()).n, size_t(0));
    CHECK(c.stats().evictions > 0);
    CHECK(cont(c, tail_of(a, 100, 103), 8).empty());
    CHECK(cont(c, tail_of(a, 10, 13), 8).empty());
    auto last = seq(55, 64);
    CHECK(cont(c, tail_of(last, 30, 33), 8) == slice(last, 33, 41));
  }
  {
    // The disk tier: a new server drafts from blocks once a lookup brings them into host memory.
    const std::string dir = tmp_path("draft");
    rm_dir(dir);
    const PromptCacheDisk disk{dir, 64ull << 20};
    auto a = seq(60, 100);
    {
      PromptCache c("", 16ull << 20, kBt, "ns-draft", disk);
      save(c, a, a.size());
      c.flush_disk();
    }
    PromptCache c("", 16ull << 20, kBt, "ns-draft", disk);
    c.index_drafts();
    CHECK(cont(c, tail_of(a, 80, 83), 8).empty());
    CHECK_EQ(c.lookup(a.data(), a.size()).n, a.size());
    CHECK(cont(c, tail_of(a, 80, 83), 8) == slice(a, 83, 91));
    CHECK(cont(c, tail_of(a, 60, 63), 8) == slice(a, 63, 71));
    rm_dir(dir);
  }
}

// Random saves under a small cap (evictions, shared prefixes, partial leaves replaced): whatever
// the index says must be what followed that m-gram in some prompt saved earlier, and a prompt
// held in full drafts its own continuation wherever its m-gram is unique and inside a block.
static void test_draft_index_random() {
  constexpr size_t m = PromptCache::kDraftGram;
  PromptCache c("", cap_for_blocks(6), kBt, "ns-r");
  c.index_drafts();
  std::vector<std::vector<int32_t>> saved;
  uint32_t x = 12345;
  auto rnd = [&](uint32_t n) { x = x * 1664525u + 1013904223u; return (x >> 8) % n; };
  // Where an m-gram occurs in all that was saved, and whether out follows one of those places.
  auto sound = [&](const int32_t* g, const std::vector<int32_t>& out) {
    for (const auto& q : saved)
      for (size_t j = 0; j + m + out.size() <= q.size(); j++)
        if (std::equal(g, g + m, q.begin() + j) && std::equal(out.begin(), out.end(), q.begin() + j + m)) return true;
    return false;
  };
  auto occurrences = [&](const int32_t* g) {
    int k = 0;
    for (const auto& q : saved)
      for (size_t j = 0; j + m <= q.size(); j++) k += std::equal(g, g + m, q.begin() + j);
    return k;
  };
  int drafted = 0, complete = 0;
  for (int it = 0; it < 300; it++) {
    std::vector<int32_t> p;
    if (!saved.empty() && rnd(3) == 0) {  // an earlier prompt's prefix, then its own way
      const auto& q = saved[rnd(uint32_t(saved.size()))];
      p.assign(q.begin(), q.begin() + rnd(uint32_t(q.size()) + 1));
    }
    const auto own = seq(int32_t(1000 + it), 1 + rnd(200));
    p.insert(p.end(), own.begin(), own.end());
    save(c, p, p.size());
    saved.push_back(p);
    for (int probe = 0; probe < 20; probe++) {
      const auto& q = saved[rnd(uint32_t(saved.size()))];
      if (q.size() < m) continue;
      const size_t end = m + rnd(uint32_t(q.size() - m + 1));  // hist = q[0, end)
      std::vector<int32_t> out(8, -1);
      out.resize(c.continuation(q.data(), end, m, out.data(), out.size()));
      if (!out.empty()) {
        drafted++;
        check(sound(q.data() + end - m, out), "draft index: a continuation no saved prompt holds, iteration " + std::to_string(it));
      }
    }
    // The prompt just saved is held in full (it was saved last): its unique in-block m-grams draft.
    if (c.lookup(p.data(), p.size()).n == p.size())
      for (size_t i = 0; i + m < p.size(); i++) {
        if (i / N != (i + m - 1) / N || occurrences(p.data() + i) != 1) continue;
        std::vector<int32_t> out(4, -1);
        out.resize(c.continuation(p.data(), i + m, m, out.data(), out.size()));
        CHECK(!out.empty() && out[0] == p[i + m]);
        complete++;
      }
  }
  CHECK(c.stats().evictions > 0);
  CHECK(drafted > 100);
  CHECK(complete > 100);
}

int main() {
  test_draft_index();
  test_draft_index_random();
  test_sharing_and_partial_matches();
  test_state_point_replaced_by_full_block();
  test_lru_under_cap();
  test_file_namespace_and_checksum();
  test_counters_survive_reopen();
  test_off();
  test_disk_tier();
  test_disk_cap_spans_namespaces();
  TEST_MAIN_END();
}
