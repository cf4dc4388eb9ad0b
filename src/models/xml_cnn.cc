// XML-CNN (Liu et al. 2017, "Deep Learning for Extreme Multi-label Text Classification").
//
// Word embeddings; three 1-d convolutions over the sequence (window sizes 2, 4 and 8, "same"
// zero padding, with bias, ReLU); dynamic max pooling: each filter's output is cut into
// `chunks` equal pieces along the sequence and each piece max-pooled (max_pool with kernel =
// stride = seq_len / chunks); the pooled features of all filters concatenated, a ReLU
// bottleneck layer, and one logit per label. The loss is binary cross-entropy of the sigmoid
// of each logit against 0/1 targets (mean over batch and labels). Embeddings N(0, 1);
// convolution and dense weights He (LeCun before the logits) normal over fan-in; biases zero.
#include <cmath>

#include "models/presets.h"

namespace kiln {
namespace {

struct XmlCnnConfig {
  int64_t vocab = 0;
  int64_t embedding = 0;
  int64_t filters = 0;  // per window size
  int64_t chunks = 0;   // dynamic max pooling pieces
  int64_t hidden = 0;   // bottleneck
  int64_t labels = 0;
  double label_rate = 0;  // fraction of targets that are 1
  int64_t batch = 0;
  int64_t seq_len = 0;
};

constexpr int64_t kWindows[] = {2, 4, 8};

Expected<std::vector<Value*>> build_xml_cnn(ModelBuilder& m, const XmlCnnConfig& config,
                                            const ModelOptions& options) {
  KILN_ASSIGN_OR_RETURN(const int64_t batch, size_option(options.batch, config.batch, "batch"));
  KILN_ASSIGN_OR_RETURN(const int64_t seq, size_option(options.seq_len, config.seq_len, "seq_len"));
  if (seq % config.chunks != 0) {
    return Status::errorf("seq_len {} is not a multiple of the {} pooling chunks", seq,
                          config.chunks);
  }
  GraphBuilder& b = m.b();
  const double relu_gain = std::sqrt(2.0);
  Value* tokens = m.data("tokens", DType::i64, {batch, seq}, uniform_int_init(config.vocab));
  Value* table = m.parameter("embed", {config.vocab, config.embedding}, normal_init(1));
  Value* embedded = b.transpose(b.gather(table, tokens), {0, 2, 1});  // [B, E, S]
  std::vector<Value*> pooled;
  for (int64_t window : kWindows) {
    const std::string name = fmt::format("conv{}", window);
    Value* w = m.parameter(name + ".w", {config.filters, config.embedding, window},
                           fan_init(config.embedding * window, relu_gain));
    const int64_t pad_begin = (window - 1) / 2;
    Value* y = b.conv(embedded, w, {}, {pad_begin, window - 1 - pad_begin});
    y = b.relu(b.add(y, b.reshape(m.parameter(name + ".b", {config.filters}, constant_init(0)),
                                  {config.filters, 1})));
    const int64_t piece = seq / config.chunks;
    y = b.apply1(
        Op::max_pool, {y},
        {{"kernel", std::vector<int64_t>{piece}}, {"strides", std::vector<int64_t>{piece}}});
    pooled.push_back(b.reshape(y, {batch, config.filters * config.chunks}));
  }
  const int64_t features = std::ssize(kWindows) * config.filters * config.chunks;
  Value* h = b.relu(dense(m, "bottleneck", b.concat(pooled, 1), features, config.hidden,
                          fan_init(features, relu_gain)));
  Value* logits = dense(m, "output", h, config.hidden, config.labels, fan_init(config.hidden, 1.0));
  if (!m.is_loss()) return std::vector<Value*>{logits};
  Value* targets =
      m.data("targets", DType::f32, {batch, config.labels}, bernoulli_init(config.label_rate));
  return std::vector<Value*>{b.apply1(Op::binary_cross_entropy, {logits, targets}), logits};
}

Preset xml_cnn_preset(std::string name, XmlCnnConfig config) {
  std::string description = fmt::format(
      "XML-CNN: vocab {}, embedding {}, {} filters x windows 2/4/8, {} pooling chunks, "
      "bottleneck {}, {} labels; batch {}, seq {}",
      config.vocab, config.embedding, config.filters, config.chunks, config.hidden, config.labels,
      config.batch, config.seq_len);
  return {{std::move(name), "xml-cnn", std::move(description)},
          [config](ModelBuilder& m, const ModelOptions& options) {
            return build_xml_cnn(m, config, options);
          }};
}

}  // namespace

std::vector<Preset> xml_cnn_presets() {
  // xml-cnn has the sizes of Liu et al.'s EUR-Lex runs (300-d embeddings, 3,956 labels).
  return {xml_cnn_preset("xml-cnn-tiny", {.vocab = 1000,
                                          .embedding = 16,
                                          .filters = 8,
                                          .chunks = 4,
                                          .hidden = 32,
                                          .labels = 64,
                                          .label_rate = 0.1,
                                          .batch = 2,
                                          .seq_len = 32}),
          xml_cnn_preset("xml-cnn", {.vocab = 30000,
                                     .embedding = 300,
                                     .filters = 128,
                                     .chunks = 4,
                                     .hidden = 512,
                                     .labels = 3956,
                                     .label_rate = 0.002,
                                     .batch = 32,
                                     .seq_len = 500})};
}

}  // namespace kiln
