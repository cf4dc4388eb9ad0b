// ViT: the Vision Transformer (Dosovitskiy et al. 2021) as timm's vit_*_patch16_224.
//
// Non-overlapping patches embedded by a strided convolution (with bias), a learned class
// token prepended, learned position embeddings added, pre-norm encoder layers, a final layer
// norm, and a linear classifier on the class token. The loss is the mean cross-entropy
// against integer labels. Layer norm epsilon 1e-6; weights, class token and position
// embeddings N(0, 0.02^2), biases zero, norm scales one.
//
// Parameters: vit-base at 224x224 has 86,567,656 and vit-tiny (DeiT-Ti's dimensions)
// 5,717,416, as timm counts them; other image sizes change the position embeddings.
#include "models/presets.h"

namespace kiln {
namespace {

struct VitConfig {
  TransformerConfig encoder;
  int64_t patch = 16;
  int64_t channels = 3;
  int64_t classes = 1000;
  int64_t batch = 0;
  int64_t image_size = 224;
};

Expected<std::vector<Value*>> build_vit(ModelBuilder& m, const VitConfig& config,
                                        const ModelOptions& options) {
  KILN_ASSIGN_OR_RETURN(const int64_t batch, size_option(options.batch, config.batch, "batch"));
  KILN_ASSIGN_OR_RETURN(const int64_t image,
                        size_option(options.image_size, config.image_size, "image_size"));
  if (image % config.patch != 0) {
    return Status::errorf("image_size {} is not a multiple of the patch size {}", image,
                          config.patch);
  }
  GraphBuilder& b = m.b();
  const int64_t hidden = config.encoder.hidden;
  const int64_t grid = image / config.patch;
  const int64_t tokens = grid * grid + 1;
  const Initializer init = normal_init(0.02);
  Value* images =
      m.data("images", DType::f32, {batch, config.channels, image, image}, normal_init(1));
  Value* patches = b.conv(
      images,
      m.parameter("patch_embed.w", {hidden, config.channels, config.patch, config.patch}, init),
      {config.patch, config.patch});
  patches = b.add(
      patches, b.reshape(m.parameter("patch_embed.b", {hidden}, constant_init(0)), {hidden, 1, 1}));
  patches = b.transpose(b.reshape(patches, {batch, hidden, grid * grid}), {0, 2, 1});
  Value* cls = b.broadcast_to(m.parameter("cls_token", {1, 1, hidden}, init), {batch, 1, hidden});
  Value* h =
      b.add(b.concat({cls, patches}, 1), m.parameter("pos_embed", {1, tokens, hidden}, init));
  for (int64_t i = 0; i < config.encoder.layers; ++i) {
    h = transformer_layer(m, fmt::format("layer{}", i), h, config.encoder);
  }
  h = layer_norm(m, "norm", h, hidden, config.encoder.norm_epsilon);
  Value* cls_out = b.reshape(b.slice(h, {0}, {1}, {1}), {batch, hidden});
  Value* logits = dense(m, "head", cls_out, hidden, config.classes, init);
  if (!m.is_loss()) return std::vector<Value*>{logits};
  Value* labels = m.data("labels", DType::i64, {batch}, uniform_int_init(config.classes));
  return std::vector<Value*>{b.cross_entropy(logits, labels), logits};
}

Preset vit_preset(std::string name, VitConfig config) {
  std::string description = fmt::format(
      "ViT: {} layers, hidden {}, {} heads, mlp {}, patch {}, {} classes; batch {}, "
      "{}x{} images",
      config.encoder.layers, config.encoder.hidden, config.encoder.heads, config.encoder.ffn,
      config.patch, config.classes, config.batch, config.image_size, config.image_size);
  return {{std::move(name), "vit", std::move(description)},
          [config](ModelBuilder& m, const ModelOptions& options) {
            return build_vit(m, config, options);
          }};
}

TransformerConfig vit_encoder(int64_t layers, int64_t hidden, int64_t heads) {
  return {.layers = layers,
          .hidden = hidden,
          .heads = heads,
          .ffn = 4 * hidden,
          .norm_epsilon = 1e-6,
          .pre_norm = true};
}

}  // namespace

std::vector<Preset> vit_presets() {
  return {vit_preset("vit-tiny", {.encoder = vit_encoder(12, 192, 3), .batch = 2}),
          vit_preset("vit-base", {.encoder = vit_encoder(12, 768, 12), .batch = 8})};
}

}  // namespace kiln
