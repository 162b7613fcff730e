#include "tokenizer/tokenizer.h"

#include "tokenizer/bpe_encoder.h"
#include "tokenizer/spm_encoder.h"
#include "tokenizer/vocab.h"

namespace weir::tokenizer {

using format::TokenizerSpec;

Result<Tokenizer> Tokenizer::Create(const TokenizerSpec& spec) {
  WEIR_ASSIGN_OR_RETURN(std::shared_ptr<const internal::Vocab> vocab, internal::BuildVocab(spec));
  return Tokenizer(std::move(vocab));
}

std::vector<int32_t> Tokenizer::Encode(std::string_view text, bool add_bos,
                                       bool parse_special) const {
  const internal::Vocab& v = *vocab_;
  std::vector<int32_t> ids;
  if (add_bos && v.bos_id >= 0) ids.push_back(v.bos_id);
  auto encode_text = [&](size_t begin, size_t end) {
    if (begin == end) return;
    std::string_view part = text.substr(begin, end - begin);
    if (v.kind == TokenizerSpec::Kind::kSentencePiece) {
      internal::EncodeSentencePiece(v, part, &ids);
    } else {
      internal::EncodeBpeMerges(v, part, &ids);
    }
  };
  // Leftmost, then longest, special piece; text between them is tokenized as text.
  size_t text_begin = 0;
  for (size_t pos = 0; pos < text.size();) {
    int32_t found = -1;
    size_t found_len = 0;
    if (v.special_first_byte[static_cast<uint8_t>(text[pos])]) {
      for (size_t len : v.special_lengths) {
        if (len > text.size() - pos) continue;
        auto it = v.specials.find(text.substr(pos, len));
        if (it == v.specials.end()) continue;
        if (!parse_special && v.types[it->second] != format::TokenType::kUserDefined) continue;
        found = it->second;
        found_len = len;
        break;
      }
    }
    if (found < 0) {
      ++pos;
      continue;
    }
    encode_text(text_begin, pos);
    ids.push_back(found);
    pos += found_len;
    text_begin = pos;
  }
  encode_text(text_begin, text.size());
  return ids;
}

std::string Tokenizer::Decode(int32_t prev, int32_t id) const {
  if (!InRange(id)) return "";
  const std::string& text = vocab_->decoded[id];
  const bool at_start = prev < 0 || prev == vocab_->bos_id;
  if (at_start && vocab_->add_space_prefix && vocab_->starts_with_space[id]) return text.substr(1);
  return text;
}

std::string Tokenizer::DecodeAll(std::span<const int32_t> ids) const {
  std::string out;
  int32_t prev = -1;
  for (int32_t id : ids) {
    out += Decode(prev, id);
    prev = id;
  }
  return out;
}

int32_t Tokenizer::FindSpecial(std::string_view piece) const {
  auto it = vocab_->specials.find(piece);
  return it == vocab_->specials.end() ? -1 : it->second;
}

std::string Tokenizer::pre_tokenizer() const {
  return vocab_->splitter ? vocab_->splitter->name() : std::string();
}

bool Tokenizer::InRange(int32_t id) const { return id >= 0 && id < vocab_->size(); }
int32_t Tokenizer::vocab_size() const { return vocab_->size(); }
int32_t Tokenizer::bos_id() const { return vocab_->bos_id; }
int32_t Tokenizer::eos_id() const { return vocab_->eos_id; }
int32_t Tokenizer::unk_id() const { return vocab_->unk_id; }
int32_t Tokenizer::pad_id() const { return vocab_->pad_id; }
bool Tokenizer::add_bos() const { return vocab_->add_bos; }
TokenizerSpec::Kind Tokenizer::kind() const { return vocab_->kind; }

std::string_view Tokenizer::piece(int32_t id) const {
  return InRange(id) ? std::string_view(vocab_->pieces[id]) : std::string_view();
}
float Tokenizer::score(int32_t id) const { return InRange(id) ? vocab_->scores[id] : 0.0f; }
format::TokenType Tokenizer::type(int32_t id) const {
  return InRange(id) ? vocab_->types[id] : format::TokenType::kNormal;
}
bool Tokenizer::is_control(int32_t id) const {
  return InRange(id) && vocab_->types[id] == format::TokenType::kControl;
}
bool Tokenizer::is_byte(int32_t id) const { return InRange(id) && vocab_->byte_value[id] >= 0; }

}  // namespace weir::tokenizer
