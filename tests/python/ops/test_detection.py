"""NonMaxSuppression and RoiAlign against onnxruntime 1.23 and onnx.reference 1.19
(float32; RoiAlign at rtol / atol 1e-5, NonMaxSuppression exactly)."""

import numpy as np
import pytest

from op_harness import check_op, make_model, run_onnxtrain

rng = np.random.default_rng(0)
F32 = dict(rtol=1e-5, atol=1e-5)


def random_boxes(batches, count, center_point=False):
    corners = rng.uniform(0, 10, (batches, count, 2))
    sizes = rng.uniform(0.5, 4, (batches, count, 2))
    if center_point:
        return np.concatenate([corners, sizes], -1).astype(np.float32)
    boxes = np.concatenate([corners, corners + sizes], -1)
    flip = rng.random((batches, count)) < 0.3  # corners in either order
    boxes[flip] = boxes[flip][:, [2, 3, 0, 1]]
    return boxes.astype(np.float32)


def nms_inputs(batches, classes, count, max_out, iou, score=None, center_point=False, ties=False):
    scores = rng.random((batches, classes, count)).astype(np.float32)
    if ties:
        scores = np.round(scores * 3) / 3
    return {
        "boxes": random_boxes(batches, count, center_point),
        "scores": scores,
        "max_output_boxes_per_class": np.array([max_out], np.int64),
        "iou_threshold": np.array([iou], np.float32),
        "score_threshold": None if score is None else np.array([score], np.float32),
    }


@pytest.mark.parametrize("reference", ["onnxruntime", "onnx.reference"])
@pytest.mark.parametrize("batches, classes, count, max_out, iou, score, center, ties", [
    (1, 1, 12, 5, 0.3, None, 0, False),
    (2, 3, 20, 4, 0.1, 0.4, 0, False),
    (2, 2, 16, 100, 0.5, 0.0, 1, False),
    (1, 2, 30, 7, 0.2, None, 0, True),
    (1, 1, 8, 0, 0.5, None, 0, False),
])
def test_non_max_suppression(reference, batches, classes, count, max_out, iou, score, center, ties):
    inputs = nms_inputs(batches, classes, count, max_out, iou, score, bool(center), ties)
    check_op("NonMaxSuppression", inputs, {"center_point_box": center}, opset=11, reference=reference)


def test_non_max_suppression_optional_inputs_omitted():
    boxes = random_boxes(1, 6)
    scores = rng.random((1, 1, 6)).astype(np.float32)
    # Without max_output_boxes_per_class nothing is selected.
    (out,) = check_op("NonMaxSuppression", {"boxes": boxes, "scores": scores}, opset=11)
    assert out.shape == (0, 3)


def test_non_max_suppression_rejects_bad_shapes():
    with pytest.raises((ValueError, RuntimeError), match=r"scores must be \[1, classes, 6\]"):
        inputs = {"boxes": random_boxes(1, 6), "scores": rng.random((1, 1, 5)).astype(np.float32)}
        run_onnxtrain(make_model("NonMaxSuppression", inputs, opset=11), inputs)


def roi_inputs(n=2, c=3, h=10, w=12, rois=5, dtype=np.float32):
    x = rng.standard_normal((n, c, h, w)).astype(dtype)
    corners = rng.uniform(-2, 11, (rois, 2))
    boxes = np.concatenate([corners, corners + rng.uniform(0.2, 6, (rois, 2))], -1).astype(dtype)
    return {"X": x, "rois": boxes, "batch_indices": rng.integers(0, n, rois).astype(np.int64)}


@pytest.mark.parametrize("opset, transform", [(16, "half_pixel"), (16, "output_half_pixel"), (10, None)])
@pytest.mark.parametrize("mode", ["avg", "max"])
@pytest.mark.parametrize("sampling_ratio, scale", [(0, 1.0), (2, 0.5)])
def test_roi_align(opset, transform, mode, sampling_ratio, scale):
    attrs = {"mode": mode, "output_height": 3, "output_width": 4, "sampling_ratio": sampling_ratio,
             "spatial_scale": scale}
    if transform:
        attrs["coordinate_transformation_mode"] = transform
    # Opset 10 has no coordinate_transformation_mode and behaves as output_half_pixel;
    # onnx.reference applies opset 16's default (half_pixel) there, onnxruntime does not.
    reference = "onnxruntime" if opset == 10 else "onnx.reference"
    check_op("RoiAlign", roi_inputs(), attrs, opset=opset, reference=reference, **F32)


@pytest.mark.parametrize("transform", ["half_pixel", "output_half_pixel"])
def test_roi_align_avg_matches_onnxruntime(transform):
    attrs = {"output_height": 2, "output_width": 3, "coordinate_transformation_mode": transform}
    check_op("RoiAlign", roi_inputs(), attrs, opset=16, **F32)


def test_roi_align_float64():
    check_op("RoiAlign", roi_inputs(dtype=np.float64), {"output_height": 2, "output_width": 2}, opset=16,
             reference="onnx.reference", rtol=1e-10, atol=1e-10)


def test_roi_align_rejects_bad_batch_index():
    inputs = roi_inputs()
    inputs["batch_indices"][0] = 7
    with pytest.raises((ValueError, RuntimeError), match=r"batch index 7 outside \[0, 2\)"):
        run_onnxtrain(make_model("RoiAlign", inputs, opset=16), inputs)
