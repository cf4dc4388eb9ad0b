// Building blocks of the zoo's models: ModelBuilder (a GraphBuilder that records what each
// graph input is and how its value is made) and the layers the models share (dense, layer
// norm, multi-head attention, transformer blocks, convolution with batch norm, masked means,
// sparse products).
//
// A model's build function runs once per graph kind. Layers read the kind where the two graphs
// differ: batch norm uses batch statistics in the loss graph and running statistics (state
// inputs) in the inference graph. Parameters are named by the caller's prefix and a fixed
// suffix ("layer0.attn" + ".wq"), and are f32. Dense weights are [in, out] (y = x W + b).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "ir/builder.h"
#include "models/model.h"

namespace kiln {

enum class GraphKind { loss, inference };

class ModelBuilder {
 public:
  ModelBuilder(std::string graph_name, GraphKind kind, bool portable)
      : b_(std::move(graph_name)), kind_(kind), portable_(portable) {}

  GraphBuilder& b() { return b_; }
  bool is_loss() const { return kind_ == GraphKind::loss; }
  bool portable() const { return portable_; }

  Value* data(std::string_view name, DType dtype, Shape shape, Initializer init);
  Value* parameter(std::string_view name, Shape shape, Initializer init);
  Value* state(std::string_view name, Shape shape, Initializer init);

  // The graph with `outputs`, named "loss" and "logits" (or "logits" alone for inference),
  // and its input kinds; each input's description is added to `inputs` (an input both graphs
  // have must be declared alike in both).
  Expected<ModelGraph> finish(const std::vector<Value*>& outputs,
                              std::map<std::string, ModelInput>& inputs);

 private:
  Value* add_input(std::string_view name, InputKind kind, TensorType type, Initializer init);

  GraphBuilder b_;
  GraphKind kind_;
  bool portable_;
  std::vector<ModelInput> declared_;
};

// N(0, gain^2 / fan), fan a layer's fan-in or fan-out: He initialization for gain sqrt(2)
// (before a ReLU), LeCun for gain 1.
Initializer fan_init(int64_t fan, double gain);

// x [..., in] W [in, out] + b [out]: parameters NAME.w and NAME.b (zeros).
Value* dense(ModelBuilder& m, const std::string& name, Value* x, int64_t in, int64_t out,
             const Initializer& weight_init);

// Layer norm over the last axis: parameters NAME.scale (ones) and NAME.bias (zeros).
Value* layer_norm(ModelBuilder& m, const std::string& name, Value* x, int64_t dim, double epsilon);

struct TransformerConfig {
  int64_t layers = 0;
  int64_t hidden = 0;
  int64_t heads = 0;
  int64_t ffn = 0;
  double norm_epsilon = 1e-5;
  bool pre_norm = false;  // ViT: x + f(norm(x)); BERT: norm(x + f(x))
};

// Multi-head self-attention of x [B, S, hidden] with no mask: parameters NAME.{wq,bq,wk,bk,
// wv,bv,wo,bo}, weights N(0, 0.02^2).
Value* self_attention(ModelBuilder& m, const std::string& name, Value* x,
                      const TransformerConfig& config);

// One encoder layer (attention, then a GELU feed-forward block), each with a residual and a
// layer norm placed as config.pre_norm says: parameters NAME.attn.*, NAME.attn_norm.*,
// NAME.ffn.{w1,b1,w2,b2} (N(0, 0.02^2), zeros), NAME.ffn_norm.*.
Value* transformer_layer(ModelBuilder& m, const std::string& name, Value* x,
                         const TransformerConfig& config);

// conv (no bias; weight NAME.w, He normal over fan-out as torchvision) then batch norm
// (NAME.bn.{scale,bias} parameters; NAME.bn.{mean,var} running statistics, inference only).
Value* conv_bn(ModelBuilder& m, const std::string& name, Value* x, int64_t in, int64_t out,
               int64_t kernel, int64_t stride, int64_t pad);

// sum(values * mask) / max(sum(mask), 1): the mean over the positions where mask is 1.
Value* masked_mean(ModelBuilder& m, Value* values, Value* mask);

}  // namespace kiln
