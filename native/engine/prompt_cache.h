// Host-memory prompt cache: the K/V of prompt prefixes, kept after the slot that computed them
// moves on, so a returning conversation (or a new one that starts with the same system prompt and
// tools) restores its state instead of prefilling it again.
//
// Storage: one file mapped shared (the server puts it in /dev/shm), cut into M blocks of at most N
// tokens. A block holds the K/V of positions [pos, pos + n) of one prompt and names the block
// before it (its parent) by key, so blocks form a trie over token chunks: prompts that share a
// prefix share its blocks, and each copy is stored and counted once. Only full blocks have
// children; a partial block (a prompt's tail, or a state point) is a leaf, dropped when a full
// block that begins with the same tokens arrives.
//
// Validity: a block carries the namespace hash (what the K/V is valid for: model, tokenizer,
// template, KV layout and type, cache policy) and a checksum over its tokens and K/V bytes. A
// process mapping an existing file (a restarted worker) keeps only blocks of its own namespace
// whose header checks out, and a restore checks the data checksum before a byte reaches a slot.
//
// Eviction: least recently used first. A lookup or save touches a whole path with one stamp, so a
// parent is never older than its children; among equally old blocks the deepest goes first, which
// makes the victim a leaf and keeps every held block reachable from the root.
//
// Disk tier (optional, a directory): every block the cache saves is written behind to one file
// of its own in the directory by a writer thread, so a block the host memory evicts, a state
// point, and what a server held when it stopped are there for the next server of the same
// namespace. The writer works from the block in host memory, which stays pinned (not reused)
// until its file is written; the scheduler thread never waits on a write. At start-up the tier
// reads each file's header into an index; a lookup that runs past what host memory holds reads
// the next blocks from their files into host memory (a read, in admission; prefetch_disk, which
// any thread may call when a request arrives, has a reader thread start the OS reading those
// files first, so that read is mostly a copy from the page cache). A file is
// `<ns16>-<key16>.mbkv` (content-addressed: two servers that write the same block write the
// same name, each through its own temporary file and an atomic rename); it carries the full
// namespace and a header checksum, and its data checksum is checked before a byte is used.
//
// Draft index (optional, for speculative decoding): the held blocks' tokens double as a corpus of
// earlier prompts and answers (the same agent's earlier turns). A hash map from each m-gram that
// lies within a block to its latest (block, offset) answers "what followed these m tokens" in
// one probe instead of a scan of every block; entries come and go with the blocks (save, disk
// import, eviction) and are checked against the block's tokens before use, so a stale or
// colliding entry costs a miss, never a wrong match. An m-gram across a block boundary is not
// indexed (m - 1 of N positions); a continuation runs on into the block's most recent child.
//
// The public API is not thread-safe: the scheduler thread is its only user.
//
// Dimension legend: N tokens per block (kBlockTokens), Bt bytes of K/V per token
// (Model::kv_token_bytes), M blocks in the file (cap / block stride), m tokens per indexed
// m-gram (kDraftGram).
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

namespace mb {

struct PromptCacheStats {
  int64_t bytes = 0;           // blocks held x block stride (header + K/V), each block once
  int64_t cap_bytes = 0;       // most bytes the cache may use (0 = off)
  int64_t blocks = 0;
  int64_t tokens = 0;          // tokens the held blocks cover (each block once)
  int64_t evictions = 0;       // blocks removed to stay under the cap (kept in the file)
  int64_t rejected = 0;        // blocks dropped for a bad checksum or header
  int64_t saved_tokens = 0;    // tokens copied in from slots
  int64_t restored_tokens = 0; // tokens copied out into slots
  bool persistent = false;     // backed by a file another process can map
  // Disk tier (all 0 when off)
  int64_t disk_bytes = 0;        // bytes of this namespace's block files in the directory
  int64_t disk_cap_bytes = 0;
  int64_t disk_blocks = 0;
  int64_t disk_hit_tokens = 0;   // tokens read back from disk into host memory by lookups
  int64_t disk_evictions = 0;    // files removed to stay under the cap
  int64_t disk_rejected = 0;     // torn or foreign files removed
  int64_t disk_written = 0;      // block files written
  int64_t disk_write_errors = 0; // writes that failed (unwritable or full directory); nothing else
};

struct PromptCacheDisk {
  std::string dir;          // "" = no disk tier
  uint64_t cap_bytes = 0;   // 0 = no disk tier
};

class DiskTier;

class PromptCache {
 public:
  static constexpr uint32_t kBlockTokens = 64;  // N

  // `path` empty = private anonymous memory (nothing survives the process). A file another live
  // process holds (flock) is not shared: the cache falls back to private memory. `ns` is the
  // namespace string; the layout (Bt, N, format) is mixed into its hash here.
  PromptCache(const std::string& path, uint64_t cap_bytes, size_t token_bytes, const std::string& ns,
              const PromptCacheDisk& disk = {});
  ~PromptCache();
  PromptCache(const PromptCache&) = delete;
  PromptCache& operator=(const PromptCache&) = delete;

  bool enabled() const { return n_blocks_ > 0; }
  // Longest prefix of tokens[0, n) the cache holds (touches its blocks).
  struct Match {
    size_t n = 0;                  // tokens matched
    std::vector<uint32_t> blocks;  // the path, in position order
  };
  Match lookup(const int32_t* tokens, size_t n);
  // How many tokens of tokens[0, n) lookup would match, host memory and the disk tier's index
  // together, without touching a block or reading a file: an estimate for choosing which request
  // goes next, which must not stall the scheduler thread on the disk.
  size_t known(const int32_t* tokens, size_t n) const;
  // Copies positions [from, upto) of a match out through write(pos, count, bytes [count][Bt]),
  // checking each block's checksum first. Returns the end actually restored (a bad block stops
  // it there and is dropped with what hangs below it).
  using Writer = std::function<void(size_t pos, size_t count, const uint8_t* bytes)>;
  size_t restore(const Match& m, size_t from, size_t upto, const Writer& write);
  // Saves tokens[0, n): blocks already held are touched; missing ones are filled through
  // read(pos, count, dst [count][Bt]). Evicts older blocks to make room; stops early (keeping
  // what it saved) when only the path being saved is left to evict.
  using Reader = std::function<void(size_t pos, size_t count, uint8_t* dst)>;
  void save(const int32_t* tokens, size_t n, const Reader& read);

  // From now on keep the draft index (see the top), over the blocks held now and every block
  // that arrives later. Off until called: a server that never drafts pays nothing on save.
  void index_drafts();
  // Draft tokens from earlier prompts: up to max tokens into out [max], those that followed the
  // latest indexed occurrence of the history's last m tokens, running on into a child block
  // past a full block's end. hist [n] is the sequence so far; the occurrence must match at
  // least min_match of its last tokens (>= m: the extra ones are compared backwards within the
  // block, so a longer context asks for a surer match). Returns the tokens written; 0 without
  // the index, for an m-gram not held, or at a leaf's end. Touches nothing: a guess does not
  // keep a block alive. The tokens are not checksummed (the K/V is not read): a torn block
  // drafts garbage, which verification rejects, so the caller keeps ids within its vocabulary.
  size_t continuation(const int32_t* hist, size_t n, size_t min_match, int32_t* out, size_t max) const;
  static constexpr size_t kDraftGram = 3;  // m

  PromptCacheStats stats() const;
  // Waits until every block queued for the disk tier is written (tests; the destructor drains too).
  void flush_disk();
  // Thread-safe (unlike the rest): asks the disk tier's reader thread to have the OS read ahead
  // the files of the longest prefix of tokens[0, n) the tier holds. Returns the blocks asked for.
  size_t prefetch_disk(const int32_t* tokens, size_t n);
  // Hex id of the namespace (with the layout mixed in), as Health reports it.
  const std::string& namespace_id() const { return ns_id_; }

 private:
  struct Header;    // in the file, one per block
  struct Counters;  // in the file's first page
  struct Meta {
    bool used = false;
    uint64_t key = 0, parent = 0;
    uint32_t pos = 0, n = 0;
    uint64_t stamp = 0;
  };
  Header* header(uint32_t i) const;
  uint8_t* data(uint32_t i) const;
  uint64_t block_checksum(uint32_t i) const;
  uint64_t header_checksum(const Header& h) const;
  void open_file(const std::string& path, size_t file_bytes);
  void rebuild();
  void link(uint32_t i);
  void free_block(uint32_t i, bool eviction);  // and every block below it
  int64_t alloc(uint64_t protect_stamp);       // -1 = nothing left to evict
  void touch(uint32_t i, uint64_t stamp);
  // The held child of `parent` sharing the most of tokens[0, left) (ties: the longer block), and
  // that length in *len; -1 = none.
  int64_t held_child(uint64_t parent, const int32_t* tokens, size_t left, size_t* len) const;
  void count_rejected();
  bool pinned(uint32_t i) const;
  // The draft index's entries of block i: added (a newer occurrence replaces an older one) or
  // removed (only those still naming block i).
  void index_block(uint32_t i);
  void unindex_block(uint32_t i);
  // Reads the disk tier's best child of `parent` at pos that matches more than `than` tokens into
  // a fresh block; -1 = none (or its file failed its checks).
  int64_t import_from_disk(uint64_t parent, size_t pos, const int32_t* tokens, size_t n, size_t than, uint64_t stamp);
  friend class DiskTier;

  size_t Bt_;
  uint64_t cap_bytes_;
  uint64_t ns_hash_ = 0;
  std::string ns_id_;
  uint32_t n_blocks_ = 0;        // M
  size_t block_data_bytes_ = 0;  // N * Bt
  size_t header_bytes_ = 0;
  size_t stride_ = 0;            // header + data: what one held block costs
  uint8_t* base_ = nullptr;
  size_t map_bytes_ = 0;
  int fd_ = -1;
  Counters* counters_ = nullptr;  // in the file's first page
  bool persistent_ = false;

  std::vector<Meta> meta_;                                          // [M]
  std::vector<uint32_t> free_;                                      // free block ids
  std::unordered_map<uint64_t, std::vector<uint32_t>> children_;    // parent key -> blocks
  // Draft index: m-gram hash -> (block << 32 | offset of its first token); at most M x (N - m + 1)
  // entries. Off (and empty) until index_drafts.
  std::unordered_map<uint64_t, uint64_t> grams_;
  bool index_on_ = false;
  std::unique_ptr<DiskTier> disk_;  // null = no disk tier
  uint64_t clock_ = 0;
  int64_t held_ = 0, held_tokens_ = 0, evictions_ = 0, rejected_ = 0, saved_tokens_ = 0, restored_tokens_ = 0;
};

// 64-bit hashes used for keys, namespaces and checksums (not cryptographic: they catch torn or
// stale blocks, not an attacker who can write the file).
uint64_t hash_bytes(const void* p, size_t n, uint64_t seed);

}  // namespace mb
