// BERT: a post-norm transformer encoder with a masked-LM head (Devlin et al. 2019).
//
// Token embeddings plus learned position embeddings (no token types), layer norm, encoder
// layers, then the MLM head: dense + GELU + layer norm, and logits over the vocabulary through
// the token embedding matrix (tied weights) plus a bias. The loss is the masked-LM
// cross-entropy: the mean over the positions where `label_mask` is 1 (about 15%, at random)
// of the cross-entropy of the logits against `labels`. Layer norm epsilon 1e-12; weights
// N(0, 0.02^2), biases zero, norm scales one.
//
// Parameters: bert-base has 109,512,762 (Google's BERT-base with its MLM head has 109,514,298:
// the difference is the 2 x 768 token-type embedding).
#include "models/presets.h"

namespace kiln {
namespace {

struct BertConfig {
  TransformerConfig encoder;
  int64_t vocab = 30522;
  int64_t max_positions = 512;
  int64_t batch = 0;
  int64_t seq_len = 0;
};

constexpr double kMaskRate = 0.15;

Expected<std::vector<Value*>> build_bert(ModelBuilder& m, const BertConfig& config,
                                         const ModelOptions& options) {
  KILN_ASSIGN_OR_RETURN(const int64_t batch, size_option(options.batch, config.batch, "batch"));
  KILN_ASSIGN_OR_RETURN(const int64_t seq, size_option(options.seq_len, config.seq_len, "seq_len"));
  if (seq > config.max_positions) {
    return Status::errorf("seq_len {} is longer than the {} position embeddings", seq,
                          config.max_positions);
  }
  GraphBuilder& b = m.b();
  const int64_t hidden = config.encoder.hidden;
  const Initializer init = normal_init(0.02);
  Value* tokens = m.data("tokens", DType::i64, {batch, seq}, uniform_int_init(config.vocab));
  Value* token_table = m.parameter("embed.tokens", {config.vocab, hidden}, init);
  Value* positions = m.parameter("embed.positions", {config.max_positions, hidden}, init);
  Value* h = b.add(b.gather(token_table, tokens), b.slice(positions, {0}, {seq}, {0}));
  h = layer_norm(m, "embed.norm", h, hidden, config.encoder.norm_epsilon);
  for (int64_t i = 0; i < config.encoder.layers; ++i) {
    h = transformer_layer(m, fmt::format("layer{}", i), h, config.encoder);
  }
  h = b.gelu(dense(m, "head.dense", h, hidden, hidden, init));
  h = layer_norm(m, "head.norm", h, hidden, config.encoder.norm_epsilon);
  Value* logits = b.add(b.matmul(h, token_table, false, true),
                        m.parameter("head.bias", {config.vocab}, constant_init(0)));
  if (!m.is_loss()) return std::vector<Value*>{logits};
  Value* labels = m.data("labels", DType::i64, {batch, seq}, uniform_int_init(config.vocab));
  Value* mask = m.data("label_mask", DType::f32, {batch, seq}, bernoulli_init(kMaskRate));
  Value* loss = masked_mean(m, b.cross_entropy(logits, labels, "none"), mask);
  return std::vector<Value*>{loss, logits};
}

Preset bert_preset(std::string name, BertConfig config) {
  std::string description = fmt::format(
      "BERT encoder + MLM head: {} layers, hidden {}, {} heads, ffn {}, vocab {}; batch {}, "
      "seq {}",
      config.encoder.layers, config.encoder.hidden, config.encoder.heads, config.encoder.ffn,
      config.vocab, config.batch, config.seq_len);
  return {{std::move(name), "bert", std::move(description)},
          [config](ModelBuilder& m, const ModelOptions& options) {
            return build_bert(m, config, options);
          }};
}

TransformerConfig bert_encoder(int64_t layers, int64_t hidden, int64_t heads) {
  return {.layers = layers,
          .hidden = hidden,
          .heads = heads,
          .ffn = 4 * hidden,
          .norm_epsilon = 1e-12,
          .pre_norm = false};
}

}  // namespace

std::vector<Preset> bert_presets() {
  return {
      bert_preset("bert-tiny", {.encoder = bert_encoder(2, 128, 2), .batch = 2, .seq_len = 16}),
      bert_preset("bert-base", {.encoder = bert_encoder(12, 768, 12), .batch = 8, .seq_len = 128}),
      bert_preset("bert-large",
                  {.encoder = bert_encoder(24, 1024, 16), .batch = 8, .seq_len = 128})};
}

}  // namespace kiln
