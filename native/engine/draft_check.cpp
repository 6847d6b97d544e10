#include "draft_check.h"

#include <string>
#include <vector>

#include "../tokenizer/tokenizer.h"

namespace mb {

static std::string quoted(const Tokenizer& t, int32_t id) {
  if (id < 0) return "none";
  return std::to_string(id) + " '" + t.token_text(id) + "'";
}

std::string vocabulary_mismatch(const Tokenizer& target, const Tokenizer& draft, const std::string& target_name,
                                const std::string& draft_name) {
  const std::string in_d = " in " + draft_name, in_t = " in " + target_name;
  const int32_t n = target.n_vocab();
  if (draft.n_vocab() != n)
    return "their vocabularies differ in size (" + std::to_string(draft.n_vocab()) + " tokens" + in_d + ", " + std::to_string(n) + in_t + ")";
  for (int32_t i = 0; i < n; i++)
    if (target.token_text(i) != draft.token_text(i))
      return "their vocabularies differ at token " + std::to_string(i) + " ('" + draft.token_text(i) + "'" + in_d + ", '" +
             target.token_text(i) + "'" + in_t + ")";
  if (target.bos() != draft.bos())
    return "their BOS tokens differ (" + quoted(draft, draft.bos()) + in_d + ", " + quoted(target, target.bos()) + in_t + ")";
  if (target.eos() != draft.eos())
    return "their EOS tokens differ (" + quoted(draft, draft.eos()) + in_d + ", " + quoted(target, target.eos()) + in_t + ")";
  if (target.adds_bos() != draft.adds_bos())
    return (target.adds_bos() ? target_name : draft_name) + " starts prompts with BOS and " + (target.adds_bos() ? draft_name : target_name) + " does not";
  for (int32_t i = 0; i < n; i++)
    if (target.is_eog(i) != draft.is_eog(i))
      return "token " + quoted(target, i) + " ends generation" + (target.is_eog(i) ? in_t : in_d) + " only";
  if (target.control_ids() != draft.control_ids()) return "their control (special) tokens differ";
  return "";
}

}  // namespace mb
