#include "draft_check.h"

#include <string>
#include <vector>

#include "../tokenizer/tokenizer.h"

namespace mb {

static std::string quoted(const Tokenizer& t, int32_t id) {
  if (id < 0) return "none";
  return std::to_string(id) + " '" + t.token_text(id) + "'";
}

std::string vocabulary_mismatch(const Tokenizer& target, const Tokenizer& draft) {
  const int32_t n = target.n_vocab();
  if (draft.n_vocab() != n)
    return "their vocabularies differ in size (" + std::to_string(draft.n_vocab()) + " tokens against " + std::to_string(n) + ")";
  for (int32_t i = 0; i < n; i++)
    if (target.token_text(i) != draft.token_text(i))
      return "their vocabularies differ at token " + std::to_string(i) + " ('" + draft.token_text(i) + "' against '" +
             target.token_text(i) + "')";
  if (target.bos() != draft.bos()) return "their BOS tokens differ (" + quoted(draft, draft.bos()) + " against " + quoted(target, target.bos()) + ")";
  if (target.eos() != draft.eos()) return "their EOS tokens differ (" + quoted(draft, draft.eos()) + " against " + quoted(target, target.eos()) + ")";
  if (target.adds_bos() != draft.adds_bos()) return "one starts prompts with BOS and the other does not";
  for (int32_t i = 0; i < n; i++)
    if (target.is_eog(i) != draft.is_eog(i))
      return "token " + quoted(target, i) + " ends generation in " + (target.is_eog(i) ? "the model" : "the draft model") + " only";
  if (target.control_ids() != draft.control_ids()) return "their control (special) tokens differ";
  return "";
}

}  // namespace mb
