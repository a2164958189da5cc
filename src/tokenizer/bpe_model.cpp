#include "tokenizer/bpe_model.h"

#include <algorithm>
#include <cstdio>
#include <queue>

#include "tokenizer/byte_level.h"
#include "tokenizer/utf8.h"

namespace fp8lm::tokenizer {

BpeModel::BpeModel(const nlohmann::json& spec, const JsonPath& at) {
  if (!spec.is_object()) at.fail("must be an object");
  // tokenizer.json files written by old versions omit "type"; Hugging Face
  // then reads a model with merges as BPE.
  const std::string type = json_has(spec, "type") ? json_string(spec, "type", at) : (spec.contains("merges") ? "BPE" : "");
  if (type.empty()) (at / "type").fail("is missing and the model has no merges (only BPE models are supported)");
  if (type != "BPE")
    (at / "type").fail("unsupported model type '" + type + "' (fp8lm reads BPE models only)");
  if (json_has(spec, "dropout") && !(spec.at("dropout").is_number() && spec.at("dropout").get<double>() == 0.0))
    (at / "dropout").fail("BPE dropout is not supported (it makes encoding random)");

  const auto& vocab = json_field(spec, "vocab", at);
  if (!vocab.is_object()) (at / "vocab").fail("must be an object mapping tokens to ids");
  std::uint32_t max_id = 0;
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    const std::uint32_t id = json_id(it.value(), at / "vocab" / it.key());
    if (id > kMaxTokenId) (at / "vocab" / it.key()).fail("id " + std::to_string(id) + " is too large");
    vocab_.emplace(it.key(), id);
    max_id = std::max(max_id, id);
  }
  if (!vocab_.empty()) {
    id_to_token_.resize(std::size_t{max_id} + 1);
    has_id_.resize(std::size_t{max_id} + 1);
    for (const auto& [token, id] : vocab_) {
      id_to_token_[id] = token;
      has_id_[id] = true;
    }
  }

  continuing_subword_prefix_ = json_string_or(spec, "continuing_subword_prefix", at, "");
  end_of_word_suffix_ = json_string_or(spec, "end_of_word_suffix", at, "");
  fuse_unk_ = json_bool_or(spec, "fuse_unk", at, false);
  byte_fallback_ = json_bool_or(spec, "byte_fallback", at, false);
  ignore_merges_ = json_bool_or(spec, "ignore_merges", at, false);
  if (json_has(spec, "unk_token")) {
    const std::string unk = json_string(spec, "unk_token", at);
    const auto found = vocab_.find(unk);
    if (found == vocab_.end()) (at / "unk_token").fail("'" + unk + "' is not in the vocabulary");
    unk_id_ = found->second;
  }
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    const auto found = vocab_.find(std::string_view(name));
    byte_ids_[static_cast<std::size_t>(b)] = found == vocab_.end() ? -1 : std::int64_t{found->second};
  }
  load_merges(json_has(spec, "merges") ? spec.at("merges") : nlohmann::json::array(), at / "merges");
}

void BpeModel::load_merges(const nlohmann::json& merges, const JsonPath& at) {
  if (!merges.is_array()) at.fail("must be an array");
  merges_.reserve(merges.size());
  for (std::size_t rank = 0; rank < merges.size(); ++rank) {
    const auto& m = merges[rank];
    std::string a, b;
    // Two spellings: "a b" (older files) or ["a", "b"] (tokens may hold spaces).
    if (m.is_string()) {
      const std::string s = m.get<std::string>();
      const auto space = s.find(' ');
      if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos)
        at[rank].fail("merge '" + s + "' must be two tokens separated by one space");
      a = s.substr(0, space);
      b = s.substr(space + 1);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      a = m[0].get<std::string>();
      b = m[1].get<std::string>();
    } else {
      at[rank].fail("merge must be a string \"a b\" or a pair [\"a\", \"b\"], got " + m.dump().substr(0, 80));
    }
    const auto ia = vocab_.find(a), ib = vocab_.find(b);
    if (ia == vocab_.end()) at[rank].fail("merge token '" + a + "' is not in the vocabulary");
    if (ib == vocab_.end()) at[rank].fail("merge token '" + b + "' is not in the vocabulary");
    std::string merged = a;
    const bool prefixed = !continuing_subword_prefix_.empty() && b.starts_with(continuing_subword_prefix_);
    merged += prefixed ? b.substr(continuing_subword_prefix_.size()) : b;
    const auto in = vocab_.find(merged);
    if (in == vocab_.end()) at[rank].fail("merged token '" + merged + "' is not in the vocabulary");
    merges_[pair_key(ia->second, ib->second)] = Merge{static_cast<std::uint32_t>(rank), in->second};
  }
}

std::size_t BpeModel::max_bytes_per_id() const {
  std::size_t longest = 4;
  for (const auto& [token, id] : vocab_) longest = std::max(longest, token.size());
  return longest;
}

bool BpeModel::covers_every_byte(bool byte_level_words) const {
  if (unk_id_ && !fuse_unk_) return true;
  if (byte_fallback_ && std::all_of(byte_ids_.begin(), byte_ids_.end(), [](std::int64_t id) { return id >= 0; }))
    return true;
  // With affixes a single character is looked up as "##c" or "c</w>": not checked here.
  if (!byte_level_words || !continuing_subword_prefix_.empty() || !end_of_word_suffix_.empty()) return false;
  for (int b = 0; b < 256; ++b)
    if (vocab_.find(byte_level::char_for_byte(static_cast<unsigned char>(b))) == vocab_.end()) return false;
  return true;
}

std::optional<std::uint32_t> BpeModel::token_to_id(std::string_view token) const {
  const auto it = vocab_.find(token);
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

const std::string* BpeModel::id_to_token(std::uint32_t id) const {
  return id < has_id_.size() && has_id_[id] ? &id_to_token_[id] : nullptr;
}

void BpeModel::encode_word(std::string_view word, std::vector<std::uint32_t>& ids) const {
  if (word.size() <= kMaxCachedWordBytes) {
    std::lock_guard lock(cache_mutex_);
    const auto it = cache_.find(word);
    if (it != cache_.end()) {
      ids.insert(ids.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  const std::size_t first = ids.size();
  encode_uncached(word, ids);
  if (word.size() <= kMaxCachedWordBytes) {
    std::lock_guard lock(cache_mutex_);
    if (cache_.size() < kCacheCapacity)
      cache_.emplace(std::string(word), std::vector<std::uint32_t>(ids.begin() + static_cast<std::ptrdiff_t>(first), ids.end()));
  }
}

void BpeModel::encode_uncached(std::string_view word, std::vector<std::uint32_t>& ids) const {
  if (ignore_merges_) {
    if (const auto it = vocab_.find(word); it != vocab_.end()) {
      ids.push_back(it->second);
      return;
    }
  }
  // Symbols form a doubly linked list over a vector; merged-away ones are dead.
  struct Symbol {
    std::uint32_t id;
    int prev, next;
    bool alive;
  };
  std::vector<Symbol> symbols;
  symbols.reserve(word.size());
  const bool affixes = !continuing_subword_prefix_.empty() || !end_of_word_suffix_.empty();
  std::string scratch;
  bool last_was_unk = false;
  auto add = [&](std::uint32_t id) {
    const int index = static_cast<int>(symbols.size());
    symbols.push_back({id, index - 1, index + 1, true});
  };
  for (std::size_t i = 0; i < word.size();) {
    const std::size_t start = i;
    i += utf8::sequence_length(static_cast<unsigned char>(word[i]));
    if (i > word.size()) i = word.size();
    std::string_view piece = word.substr(start, i - start);
    if (affixes) {
      scratch.clear();
      if (start > 0) scratch += continuing_subword_prefix_;
      scratch += piece;
      if (i == word.size()) scratch += end_of_word_suffix_;
      piece = scratch;
    }
    if (const auto it = vocab_.find(piece); it != vocab_.end()) {
      add(it->second);
      last_was_unk = false;
      continue;
    }
    if (byte_fallback_) {
      const std::string_view raw = word.substr(start, i - start);
      bool all = true;
      for (const char c : raw) all = all && byte_ids_[static_cast<unsigned char>(c)] >= 0;
      if (all) {
        for (const char c : raw) add(static_cast<std::uint32_t>(byte_ids_[static_cast<unsigned char>(c)]));
        last_was_unk = false;
        continue;
      }
    }
    if (unk_id_) {
      if (!(fuse_unk_ && last_was_unk)) add(*unk_id_);
      last_was_unk = true;
    }
    // Without an unk token an unknown character is dropped, as Hugging Face does.
  }
  if (symbols.empty()) return;
  symbols.back().next = -1;

  // Lowest rank first; among equal ranks the leftmost pair (smallest index).
  struct Candidate {
    std::uint32_t rank;
    int left;
    std::uint32_t new_id;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : left > o.left; }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> queue;
  auto consider = [&](int left) {
    if (left < 0) return;
    const int right = symbols[static_cast<std::size_t>(left)].next;
    if (right < 0) return;
    const auto it = merges_.find(pair_key(symbols[static_cast<std::size_t>(left)].id, symbols[static_cast<std::size_t>(right)].id));
    if (it != merges_.end()) queue.push({it->second.rank, left, it->second.new_id});
  };
  for (int k = 0; k + 1 < static_cast<int>(symbols.size()); ++k) consider(k);
  while (!queue.empty()) {
    const Candidate c = queue.top();
    queue.pop();
    Symbol& left = symbols[static_cast<std::size_t>(c.left)];
    if (!left.alive || left.next < 0) continue;
    Symbol& right = symbols[static_cast<std::size_t>(left.next)];
    // Stale entry: the pair at this position changed since it was queued.
    const auto it = merges_.find(pair_key(left.id, right.id));
    if (it == merges_.end() || it->second.rank != c.rank || it->second.new_id != c.new_id) continue;
    left.id = c.new_id;
    right.alive = false;
    left.next = right.next;
    if (right.next >= 0) symbols[static_cast<std::size_t>(right.next)].prev = c.left;
    consider(left.prev);
    consider(c.left);
  }
  for (const Symbol& s : symbols)
    if (s.alive) ids.push_back(s.id);
}

}  // namespace fp8lm::tokenizer
