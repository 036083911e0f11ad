// Object detection: NonMaxSuppression and RoiAlign.
//
// NonMaxSuppression: per (batch, class), the boxes whose score passes score_threshold,
// highest score first (the lower index first among equal scores), each kept unless its
// IoU with a box already kept exceeds iou_threshold, at most max_output_boxes_per_class of
// them. Output [selected, 3] of (batch, class, box), batch-major, then class, then order
// of selection.
//
// RoiAlign: each region (x1, y1, x2, y2) of rois, scaled by spatial_scale (and shifted by
// half a pixel with coordinate_transformation_mode half_pixel), is cut into
// output_height x output_width bins; each bin averages (or takes the max of) a grid of
// sampling_ratio^2 bilinear samples (ceil(bin size) per axis when sampling_ratio is 0).
#include <algorithm>
#include <array>
#include <cmath>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include "core/dispatch.h"
#include "core/parallel.h"
#include "ops/kernel_registry.h"

namespace onnxtrain {
namespace {

struct Box {
  double x_min, y_min, x_max, y_max;
};

template <typename T>
double to_double(T v) {
  return static_cast<double>(static_cast<compute_type_t<T>>(v));
}

template <typename T>
Box read_box(const T* b, bool center_point) {
  const double v0 = to_double(b[0]), v1 = to_double(b[1]), v2 = to_double(b[2]), v3 = to_double(b[3]);
  if (center_point) return {v0 - v2 / 2, v1 - v3 / 2, v0 + v2 / 2, v1 + v3 / 2};
  return {std::min(v1, v3), std::min(v0, v2), std::max(v1, v3), std::max(v0, v2)};
}

// IoU(a, b) > threshold; boxes without area never suppress.
bool suppresses(const Box& a, const Box& b, double threshold) {
  const double ix = std::min(a.x_max, b.x_max) - std::max(a.x_min, b.x_min);
  const double iy = std::min(a.y_max, b.y_max) - std::max(a.y_min, b.y_min);
  if (ix <= 0 || iy <= 0) return false;
  const double inter = ix * iy;
  const double area_a = (a.x_max - a.x_min) * (a.y_max - a.y_min);
  const double area_b = (b.x_max - b.x_min) * (b.y_max - b.y_min);
  const double uni = area_a + area_b - inter;
  if (area_a <= 0 || area_b <= 0 || uni <= 0) return false;
  return inter / uni > threshold;
}

// A scalar (or 1-element) optional input read as double; `fallback` when omitted or empty.
double scalar_input(KernelContext& ctx, size_t i, double fallback, const char* name) {
  if (!ctx.has_input(i) || ctx.input(i).numel() == 0) return fallback;
  const Tensor& t = ctx.input(i);
  if (t.numel() != 1) ctx.fail(std::string(name) + " must hold one value, got " + shape_string(t.shape()));
  return dispatch<float, double, Float16, BFloat16, int64_t, int32_t>(t.dtype(), name, [&]<typename T>() {
    return static_cast<double>(static_cast<compute_type_t<T>>(t.data<T>()[0]));
  });
}

template <typename T>
std::vector<int64_t> non_max_suppression(const Tensor& boxes, const Tensor& scores, int64_t max_per_class,
                                         double iou_threshold, std::optional<double> score_threshold,
                                         bool center_point) {
  const int64_t batches = boxes.dim(0), count = boxes.dim(1), classes = scores.dim(1);
  const T* pb = boxes.data<T>();
  const T* ps = scores.data<T>();
  std::vector<std::vector<int64_t>> per_class(static_cast<size_t>(batches * classes));
  parallel_for(batches * classes, 1, [&](int64_t begin, int64_t end) {
    std::vector<int64_t> order;
    std::vector<Box> kept;
    for (int64_t bc = begin; bc < end; ++bc) {
      const int64_t b = bc / classes;
      const T* s = ps + bc * count;
      order.clear();
      for (int64_t i = 0; i < count; ++i) {
        if (!score_threshold || to_double(s[i]) > *score_threshold) order.push_back(i);
      }
      std::stable_sort(order.begin(), order.end(),
                       [&](int64_t i, int64_t j) { return to_double(s[i]) > to_double(s[j]); });
      kept.clear();
      std::vector<int64_t>& selected = per_class[static_cast<size_t>(bc)];
      for (int64_t i : order) {
        if (static_cast<int64_t>(selected.size()) >= max_per_class) break;
        const Box box = read_box(pb + (b * count + i) * 4, center_point);
        const bool suppressed =
            std::any_of(kept.begin(), kept.end(), [&](const Box& k) { return suppresses(box, k, iou_threshold); });
        if (suppressed) continue;
        kept.push_back(box);
        selected.push_back(i);
      }
    }
  });
  std::vector<int64_t> out;
  for (int64_t bc = 0; bc < batches * classes; ++bc) {
    for (int64_t i : per_class[static_cast<size_t>(bc)]) out.insert(out.end(), {bc / classes, bc % classes, i});
  }
  return out;
}

const KernelRegistration kNonMaxSuppression{
    "", "NonMaxSuppression", 10, kLatestOpset, {.host_inputs = {2, 3, 4}}, [](const KernelInfo& info) {
      const int64_t center = info.int_attribute("center_point_box", 0);
      if (center != 0 && center != 1) info.fail("center_point_box is " + std::to_string(center) + ", expected 0 or 1");
      return make_kernel([center](KernelContext& ctx) {
        const Tensor& boxes = ctx.input(0);
        const Tensor& scores = ctx.input(1);
        if (boxes.rank() != 3 || boxes.dim(2) != 4) {
          ctx.fail("boxes must be [batches, boxes, 4], got " + shape_string(boxes.shape()));
        }
        if (scores.rank() != 3 || scores.dim(0) != boxes.dim(0) || scores.dim(2) != boxes.dim(1)) {
          ctx.fail("scores must be [" + std::to_string(boxes.dim(0)) + ", classes, " + std::to_string(boxes.dim(1)) +
                   "] for boxes " + shape_string(boxes.shape()) + ", got " + shape_string(scores.shape()));
        }
        if (scores.dtype() != boxes.dtype()) ctx.fail("boxes and scores differ in element type");
        const double max_output = scalar_input(ctx, 2, 0, "max_output_boxes_per_class");
        const double iou = scalar_input(ctx, 3, 0, "iou_threshold");
        std::optional<double> score_threshold;
        if (ctx.has_input(4) && ctx.input(4).numel() > 0) score_threshold = scalar_input(ctx, 4, 0, "score_threshold");
        const int64_t max_per_class = max_output > 0 ? static_cast<int64_t>(max_output) : 0;
        const std::vector<int64_t> selected =
            dispatch<float, double, Float16, BFloat16>(boxes.dtype(), "NonMaxSuppression", [&]<typename T>() {
              return non_max_suppression<T>(boxes, scores, max_per_class, iou, score_threshold, center == 1);
            });
        Tensor& out = ctx.allocate_output(0, DType::kInt64, {static_cast<int64_t>(selected.size() / 3), 3});
        std::copy(selected.begin(), selected.end(), out.data<int64_t>());
      });
    }};

enum class RoiPooling { kAverage, kMax };

struct RoiAlignParams {
  RoiPooling mode = RoiPooling::kAverage;
  int64_t height = 1, width = 1, sampling_ratio = 0;
  float spatial_scale = 1.0f;
  bool half_pixel = true;
};

// One bilinear sample at (y, x) of an H x W plane: four (offset, weight) pairs; all weights
// zero outside [-1, H] x [-1, W].
struct Sample {
  std::array<int64_t, 4> at{};
  std::array<double, 4> weight{};
};

Sample bilinear_sample(double y, double x, int64_t h, int64_t w) {
  Sample s;
  if (y < -1.0 || y > static_cast<double>(h) || x < -1.0 || x > static_cast<double>(w)) return s;
  y = std::max(y, 0.0);
  x = std::max(x, 0.0);
  int64_t y_low = static_cast<int64_t>(y), x_low = static_cast<int64_t>(x), y_high = y_low + 1, x_high = x_low + 1;
  if (y_low >= h - 1) {
    y_low = y_high = h - 1;
    y = static_cast<double>(y_low);
  }
  if (x_low >= w - 1) {
    x_low = x_high = w - 1;
    x = static_cast<double>(x_low);
  }
  const double ly = y - static_cast<double>(y_low), lx = x - static_cast<double>(x_low);
  const double hy = 1 - ly, hx = 1 - lx;
  s.at = {y_low * w + x_low, y_low * w + x_high, y_high * w + x_low, y_high * w + x_high};
  s.weight = {hy * hx, hy * lx, ly * hx, ly * lx};
  return s;
}

template <typename T>
void roi_align(const Tensor& x, const Tensor& rois, const std::vector<int64_t>& batch, const RoiAlignParams& p,
               Tensor& y) {
  using C = compute_type_t<T>;
  const int64_t channels = x.dim(1), h = x.dim(2), w = x.dim(3), count = rois.dim(0);
  const T* px = x.data<T>();
  const T* pr = rois.data<T>();
  T* py = y.data<T>();
  parallel_for(count, 1, [&](int64_t begin, int64_t end) {
    std::vector<Sample> samples;
    for (int64_t r = begin; r < end; ++r) {
      const double offset = p.half_pixel ? 0.5 : 0.0, scale = p.spatial_scale;
      const double x1 = static_cast<double>(static_cast<C>(pr[r * 4])) * scale - offset;
      const double y1 = static_cast<double>(static_cast<C>(pr[r * 4 + 1])) * scale - offset;
      double roi_w = static_cast<double>(static_cast<C>(pr[r * 4 + 2])) * scale - offset - x1;
      double roi_h = static_cast<double>(static_cast<C>(pr[r * 4 + 3])) * scale - offset - y1;
      if (!p.half_pixel) {
        roi_w = std::max(roi_w, 1.0);
        roi_h = std::max(roi_h, 1.0);
      }
      const double bin_h = roi_h / static_cast<double>(p.height), bin_w = roi_w / static_cast<double>(p.width);
      const int64_t grid_h = p.sampling_ratio > 0 ? p.sampling_ratio : static_cast<int64_t>(std::ceil(bin_h));
      const int64_t grid_w = p.sampling_ratio > 0 ? p.sampling_ratio : static_cast<int64_t>(std::ceil(bin_w));
      const double samples_per_bin = static_cast<double>(std::max<int64_t>(grid_h * grid_w, 1));
      for (int64_t ph = 0; ph < p.height; ++ph) {
        for (int64_t pw = 0; pw < p.width; ++pw) {
          samples.clear();
          for (int64_t iy = 0; iy < grid_h; ++iy) {
            const double sy = y1 + static_cast<double>(ph) * bin_h +
                              (static_cast<double>(iy) + 0.5) * bin_h / static_cast<double>(grid_h);
            for (int64_t ix = 0; ix < grid_w; ++ix) {
              const double sx = x1 + static_cast<double>(pw) * bin_w +
                                (static_cast<double>(ix) + 0.5) * bin_w / static_cast<double>(grid_w);
              samples.push_back(bilinear_sample(sy, sx, h, w));
            }
          }
          for (int64_t c = 0; c < channels; ++c) {
            const T* plane = px + (batch[static_cast<size_t>(r)] * channels + c) * h * w;
            double value = 0;
            bool first = true;
            for (const Sample& s : samples) {
              if (p.mode == RoiPooling::kAverage) {
                for (int k = 0; k < 4; ++k) value += s.weight[k] * static_cast<double>(static_cast<C>(plane[s.at[k]]));
                continue;
              }
              double best = s.weight[0] * static_cast<double>(static_cast<C>(plane[s.at[0]]));
              for (int k = 1; k < 4; ++k) {
                best = std::max(best, s.weight[k] * static_cast<double>(static_cast<C>(plane[s.at[k]])));
              }
              value = first ? best : std::max(value, best);
              first = false;
            }
            if (p.mode == RoiPooling::kAverage) value /= samples_per_bin;
            py[((r * channels + c) * p.height + ph) * p.width + pw] = static_cast<T>(static_cast<C>(value));
          }
        }
      }
    }
  });
}

const KernelRegistration kRoiAlign{
    "", "RoiAlign", 10, kLatestOpset, {.host_inputs = {2}}, [](const KernelInfo& info) {
      RoiAlignParams p;
      const std::string mode = info.string_attribute("mode", "avg");
      if (mode != "avg" && mode != "max") info.fail("mode is \"" + mode + "\", expected avg or max");
      p.mode = mode == "max" ? RoiPooling::kMax : RoiPooling::kAverage;
      p.height = info.int_attribute("output_height", 1);
      p.width = info.int_attribute("output_width", 1);
      if (p.height < 1 || p.width < 1) info.fail("output_height and output_width must be 1 or more");
      p.sampling_ratio = info.int_attribute("sampling_ratio", 0);
      if (p.sampling_ratio < 0) info.fail("sampling_ratio is negative");
      p.spatial_scale = info.float_attribute("spatial_scale", 1.0f);
      const std::string transform = info.string_attribute("coordinate_transformation_mode",
                                                          info.opset() >= 16 ? "half_pixel" : "output_half_pixel");
      if (transform != "half_pixel" && transform != "output_half_pixel") {
        info.fail("coordinate_transformation_mode is \"" + transform + "\", expected half_pixel or output_half_pixel");
      }
      p.half_pixel = transform == "half_pixel";
      return make_kernel([p](KernelContext& ctx) {
        const Tensor& x = ctx.input(0);
        const Tensor& rois = ctx.input(1);
        const Tensor& indices = ctx.input(2);
        if (x.rank() != 4) ctx.fail("X must be [N, C, H, W], got " + shape_string(x.shape()));
        if (rois.rank() != 2 || rois.dim(1) != 4)
          ctx.fail("rois must be [num_rois, 4], got " + shape_string(rois.shape()));
        if (rois.dtype() != x.dtype()) ctx.fail("rois and X differ in element type");
        if (indices.rank() != 1 || indices.dim(0) != rois.dim(0)) {
          ctx.fail("batch_indices must be [" + std::to_string(rois.dim(0)) + "], got " + shape_string(indices.shape()));
        }
        const std::vector<int64_t> batch = indices.to_int64_vector();
        for (int64_t b : batch) {
          if (b < 0 || b >= x.dim(0)) {
            ctx.fail("batch index " + std::to_string(b) + " outside [0, " + std::to_string(x.dim(0)) + ")");
          }
        }
        Tensor& y = ctx.allocate_output(0, x.dtype(), {rois.dim(0), x.dim(1), p.height, p.width});
        if (y.numel() == 0) return;
        if (x.dim(2) == 0 || x.dim(3) == 0) ctx.fail("X has an empty spatial axis: " + shape_string(x.shape()));
        dispatch<float, double, Float16, BFloat16>(x.dtype(), "RoiAlign",
                                                   [&]<typename T>() { roi_align<T>(x, rois, batch, p, y); });
      });
    }};

}  // namespace
}  // namespace onnxtrain
