#include "models/layers.h"

#include <cmath>

#include "support/check.h"

namespace kiln {

Value* ModelBuilder::add_input(std::string_view name, InputKind kind, TensorType type,
                               Initializer init) {
  Value* value = b_.input(name, type.dtype, type.shape);
  if (value == nullptr) return nullptr;
  KILN_CHECK(value->name() == name, "model input '{}' declared twice", name);
  declared_.push_back({std::string(name), kind, std::move(type), std::move(init)});
  return value;
}

Value* ModelBuilder::data(std::string_view name, DType dtype, Shape shape, Initializer init) {
  return add_input(name, InputKind::data, {dtype, std::move(shape)}, std::move(init));
}

Value* ModelBuilder::parameter(std::string_view name, Shape shape, Initializer init) {
  return add_input(name, InputKind::parameter, {DType::f32, std::move(shape)}, std::move(init));
}

Value* ModelBuilder::state(std::string_view name, Shape shape, Initializer init) {
  return add_input(name, InputKind::state, {DType::f32, std::move(shape)}, std::move(init));
}

Expected<ModelGraph> ModelBuilder::finish(const std::vector<Value*>& outputs,
                                          std::map<std::string, ModelInput>& inputs) {
  for (Value* output : outputs) b_.output(output);
  KILN_ASSIGN_OR_RETURN(Graph graph, b_.finish());
  const std::vector<std::string_view> names = is_loss()
                                                  ? std::vector<std::string_view>{"loss", "logits"}
                                                  : std::vector<std::string_view>{"logits"};
  KILN_CHECK(graph.outputs().size() == names.size(), "a zoo graph has {} outputs, expected {}",
             graph.outputs().size(), names.size());
  for (size_t i = 0; i < names.size(); ++i) graph.rename_value(graph.outputs()[i], names[i]);
  ModelGraph result{std::move(graph), {}};
  for (const ModelInput& input : declared_) {
    result.input_kinds.push_back(input.kind);
    auto [it, inserted] = inputs.try_emplace(input.name, input);
    KILN_CHECK(inserted || (it->second.kind == input.kind && it->second.type == input.type),
               "model input '{}' is declared differently in the loss and inference graphs",
               input.name);
  }
  return result;
}

Initializer fan_init(int64_t fan, double gain) {
  return normal_init(gain / std::sqrt(static_cast<double>(fan)));
}

Value* dense(ModelBuilder& m, const std::string& name, Value* x, int64_t in, int64_t out,
             const Initializer& weight_init) {
  Value* y = m.b().matmul(x, m.parameter(name + ".w", {in, out}, weight_init));
  return m.b().add(y, m.parameter(name + ".b", {out}, constant_init(0)));
}

Value* layer_norm(ModelBuilder& m, const std::string& name, Value* x, int64_t dim, double epsilon) {
  Value* scale = m.parameter(name + ".scale", {dim}, constant_init(1));
  Value* bias = m.parameter(name + ".bias", {dim}, constant_init(0));
  return m.b().layer_norm(x, scale, bias, -1, epsilon);
}

namespace {

const Initializer& transformer_init() {
  static const Initializer init = normal_init(0.02);
  return init;
}

// [B, S, heads * d] -> [B, heads, S, d].
Value* split_heads(GraphBuilder& b, Value* x, int64_t batch, int64_t seq, int64_t heads,
                   int64_t head_dim) {
  return b.transpose(b.reshape(x, {batch, seq, heads, head_dim}), {0, 2, 1, 3});
}

}  // namespace

Value* self_attention(ModelBuilder& m, const std::string& name, Value* x,
                      const TransformerConfig& config) {
  GraphBuilder& b = m.b();
  if (x == nullptr) return nullptr;
  const int64_t batch = x->shape().dim(0);
  const int64_t seq = x->shape().dim(1);
  const int64_t hidden = config.hidden;
  const int64_t head_dim = hidden / config.heads;
  auto project = [&](const std::string& w, const std::string& bias) {
    Value* y = b.matmul(x, m.parameter(name + "." + w, {hidden, hidden}, transformer_init()));
    return b.add(y, m.parameter(name + "." + bias, {hidden}, constant_init(0)));
  };
  Value* q = split_heads(b, project("wq", "bq"), batch, seq, config.heads, head_dim);
  Value* k = split_heads(b, project("wk", "bk"), batch, seq, config.heads, head_dim);
  Value* v = split_heads(b, project("wv", "bv"), batch, seq, config.heads, head_dim);
  Value* scores =
      b.mul_scalar(b.matmul(q, k, false, true), 1.0 / std::sqrt(static_cast<double>(head_dim)));
  Value* context = b.matmul(b.softmax(scores, -1), v);  // [B, heads, S, d]
  context = b.reshape(b.transpose(context, {0, 2, 1, 3}), {batch, seq, hidden});
  Value* out = b.matmul(context, m.parameter(name + ".wo", {hidden, hidden}, transformer_init()));
  return b.add(out, m.parameter(name + ".bo", {hidden}, constant_init(0)));
}

Value* transformer_layer(ModelBuilder& m, const std::string& name, Value* x,
                         const TransformerConfig& config) {
  GraphBuilder& b = m.b();
  auto feed_forward = [&](Value* h) {
    Value* inner = b.add(
        b.matmul(h, m.parameter(name + ".ffn.w1", {config.hidden, config.ffn}, transformer_init())),
        m.parameter(name + ".ffn.b1", {config.ffn}, constant_init(0)));
    return b.add(b.matmul(b.gelu(inner), m.parameter(name + ".ffn.w2", {config.ffn, config.hidden},
                                                     transformer_init())),
                 m.parameter(name + ".ffn.b2", {config.hidden}, constant_init(0)));
  };
  auto norm = [&](const std::string& which, Value* h) {
    return layer_norm(m, name + "." + which, h, config.hidden, config.norm_epsilon);
  };
  if (config.pre_norm) {
    x = b.add(x, self_attention(m, name + ".attn", norm("attn_norm", x), config));
    return b.add(x, feed_forward(norm("ffn_norm", x)));
  }
  x = norm("attn_norm", b.add(x, self_attention(m, name + ".attn", x, config)));
  return norm("ffn_norm", b.add(x, feed_forward(x)));
}

Value* conv_bn(ModelBuilder& m, const std::string& name, Value* x, int64_t in, int64_t out,
               int64_t kernel, int64_t stride, int64_t pad) {
  GraphBuilder& b = m.b();
  Value* w = m.parameter(name + ".w", {out, in, kernel, kernel},
                         fan_init(out * kernel * kernel, std::sqrt(2.0)));
  Value* y = b.conv(x, w, {stride, stride}, {pad, pad, pad, pad});
  Value* scale = m.parameter(name + ".bn.scale", {out}, constant_init(1));
  Value* bias = m.parameter(name + ".bn.bias", {out}, constant_init(0));
  if (m.is_loss()) {
    std::vector<Value*> normalized = b.apply(Op::batch_norm_train, {y, scale, bias});
    return normalized.empty() ? nullptr : normalized[0];
  }
  Value* mean = m.state(name + ".bn.mean", {out}, constant_init(0));
  Value* var = m.state(name + ".bn.var", {out}, constant_init(1));
  return b.apply1(Op::batch_norm_infer, {y, scale, bias, mean, var});
}

Value* masked_mean(ModelBuilder& m, Value* values, Value* mask) {
  GraphBuilder& b = m.b();
  Value* total = b.sum(b.mul(values, mask), {});
  return b.div(total, b.max(b.sum(mask, {}), b.scalar(1.0)));
}

}  // namespace kiln
