// ResNet (He et al. 2016) as torchvision builds it: a 7x7 stride-2 stem with batch norm, ReLU
// and 3x3 stride-2 max pooling; four stages of basic (two 3x3) or bottleneck (1x1, 3x3, 1x1,
// stride on the 3x3 as in "ResNet v1.5") residual blocks, a 1x1 convolution with batch norm
// on the shortcut where the shape changes; global average pooling and a linear classifier.
// Convolutions have no bias. The loss is the mean cross-entropy against integer labels.
//
// In the loss graph batch norm normalizes with the batch's statistics (batch_norm_train, as
// PyTorch in training mode; updating the running statistics belongs to the training step); the
// inference graph uses the running statistics, state inputs NAME.bn.mean (zeros) and
// NAME.bn.var (ones). Convolution weights are He normal over fan-out (torchvision's
// kaiming_normal_(mode="fan_out")); the classifier is LeCun normal; biases zero.
//
// Parameters: resnet-18 has 11,689,512 and resnet-50 25,557,032, as torchvision counts them.
#include <fmt/ranges.h>

#include <cmath>

#include "models/presets.h"

namespace kiln {
namespace {

struct ResNetConfig {
  bool bottleneck = false;
  std::vector<int64_t> blocks;  // per stage
  int64_t width = 64;           // of the stem and the first stage; doubling per stage
  int64_t classes = 1000;
  int64_t batch = 0;
  int64_t image_size = 224;
};

Value* residual_block(ModelBuilder& m, const std::string& name, Value* x, int64_t in, int64_t width,
                      int64_t stride, bool bottleneck) {
  GraphBuilder& b = m.b();
  const int64_t out = bottleneck ? 4 * width : width;
  Value* y = nullptr;
  if (bottleneck) {
    y = b.relu(conv_bn(m, name + ".conv1", x, in, width, 1, 1, 0));
    y = b.relu(conv_bn(m, name + ".conv2", y, width, width, 3, stride, 1));
    y = conv_bn(m, name + ".conv3", y, width, out, 1, 1, 0);
  } else {
    y = b.relu(conv_bn(m, name + ".conv1", x, in, width, 3, stride, 1));
    y = conv_bn(m, name + ".conv2", y, width, width, 3, 1, 1);
  }
  Value* shortcut =
      stride != 1 || in != out ? conv_bn(m, name + ".downsample", x, in, out, 1, stride, 0) : x;
  return b.relu(b.add(y, shortcut));
}

Expected<std::vector<Value*>> build_resnet(ModelBuilder& m, const ResNetConfig& config,
                                           const ModelOptions& options) {
  KILN_ASSIGN_OR_RETURN(const int64_t batch, size_option(options.batch, config.batch, "batch"));
  KILN_ASSIGN_OR_RETURN(const int64_t image,
                        size_option(options.image_size, config.image_size, "image_size"));
  GraphBuilder& b = m.b();
  Value* images = m.data("images", DType::f32, {batch, 3, image, image}, normal_init(1));
  Value* h = b.relu(conv_bn(m, "stem.conv", images, 3, config.width, 7, 2, 3));
  h = b.apply1(Op::max_pool, {h},
               {{"kernel", std::vector<int64_t>{3, 3}},
                {"strides", std::vector<int64_t>{2, 2}},
                {"pads", std::vector<int64_t>{1, 1, 1, 1}}});
  int64_t channels = config.width;
  for (size_t stage = 0; stage < config.blocks.size(); ++stage) {
    const int64_t width = config.width << stage;
    for (int64_t block = 0; block < config.blocks[stage]; ++block) {
      const int64_t stride = stage > 0 && block == 0 ? 2 : 1;
      h = residual_block(m, fmt::format("stage{}.block{}", stage + 1, block), h, channels, width,
                         stride, config.bottleneck);
      channels = config.bottleneck ? 4 * width : width;
    }
  }
  h = b.mean(h, {2, 3});
  Value* logits = dense(m, "fc", h, channels, config.classes, fan_init(channels, 1.0));
  if (!m.is_loss()) return std::vector<Value*>{logits};
  Value* labels = m.data("labels", DType::i64, {batch}, uniform_int_init(config.classes));
  return std::vector<Value*>{b.cross_entropy(logits, labels), logits};
}

Preset resnet_preset(std::string name, ResNetConfig config) {
  std::string description =
      fmt::format("ResNet, {} blocks {}, width {}, {} classes, batch norm; batch {}, {}x{} images",
                  config.bottleneck ? "bottleneck" : "basic", fmt::join(config.blocks, "-"),
                  config.width, config.classes, config.batch, config.image_size, config.image_size);
  return {{std::move(name), "resnet", std::move(description)},
          [config](ModelBuilder& m, const ModelOptions& options) {
            return build_resnet(m, config, options);
          }};
}

}  // namespace

std::vector<Preset> resnet_presets() {
  return {resnet_preset(
              "resnet-tiny",
              {.blocks = {1, 1, 1, 1}, .width = 8, .classes = 10, .batch = 2, .image_size = 32}),
          resnet_preset("resnet-18", {.blocks = {2, 2, 2, 2}, .batch = 8}),
          resnet_preset("resnet-50", {.bottleneck = true, .blocks = {3, 4, 6, 3}, .batch = 8})};
}

}  // namespace kiln
