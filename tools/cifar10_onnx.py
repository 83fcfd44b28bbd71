"""Train the CIFAR-10 classifier that ships as ONNX (``models/cifar10_plain.onnx``), or export
one from a (partial) run.

  python tools/cifar10_onnx.py train RUN_DIR [EPOCHS]     (resumable; default 30 epochs)
  python tools/cifar10_onnx.py export RUN_DIR [OUT_STEM]  (default models/cifar10_plain)

The net is :func:`workbench.nets.models.plain_classifier`: the layers a PyTorch user writes
(3x3 conv, BatchNorm, ``Hardtanh(0, 1)``, residual units, max pooling, global average pooling,
linear), trained with the classifier notebook's recipe (quantisation-aware, augmentation, Adam
3e-3 with cosine decay, batch 64) on the 20,000 training images of the data folder.  Export
writes it as the ONNX graph PyTorch's exporter writes for those layers (opset 17, BatchNorm
folded as in eval-mode export; :func:`workbench.ir.to_onnx.to_onnx`), and scores it on all
10,000 test images with ONNX Runtime and through the ES 2.0 shaders compiled from the ONNX
file; ``OUT_STEM.onnx``, ``.json`` and ``.md`` (the card).
"""
import json
import sys
from pathlib import Path

import workbench  # noqa: F401  (TF settings first)
import cifar10_reference  # beside this script
from workbench import ir
from workbench.ir.to_onnx import to_onnx
from workbench.nets import onnx_model

RECIPE = cifar10_reference.RECIPE.replace(net="plain", activation="bounded_relu")
OPSET = 17


def train(run_dir, epochs=30):
    cifar10_reference.train(run_dir, epochs, RECIPE)


def export(run_dir, stem="models/cifar10_plain"):
    stem = Path(stem)
    protos = []

    def as_onnx(keras_model):
        protos.append(to_onnx(ir.from_keras(keras_model), OPSET))
        return onnx_model.OnnxModel(protos[-1], stem.name)
    keras_model, result, fields = cifar10_reference.scored(run_dir, "cifar10_onnx.py", as_onnx)
    epochs_done = fields["epochs_done"]
    stem.parent.mkdir(parents=True, exist_ok=True)
    onnx_path = stem.with_suffix(".onnx")
    partial = onnx_path.with_name(f".{onnx_path.name}.partial")
    partial.write_bytes(protos[0].SerializeToString())
    partial.replace(onnx_path)
    card = {
        "model": onnx_path.name, "net": "workbench.nets.models.plain_classifier, as ONNX",
        "parameters": keras_model.count_params(), "opset": OPSET,
        **{k: fields[k] for k in ("recipe", "epochs_done", "finished", "training_minutes",
                                  "data", "machine")},
        "test": {"images": result["images"], "top1_keras": result["keras_top1"],
                 "top1_onnxruntime": result["top1_TF"], "top1_gpu": result["top1_GPU"],
                 "gpu_top1_equals_onnxruntime": result["gpu_top1_equals_tf"],
                 "max_logit_diff_gpu_onnxruntime": result["max_logit_diff_gpu_tf"],
                 "gpu": "ES 2.0 shaders compiled from the .onnx file, 16-bit fixed-point "
                        "dense layer, Mesa llvmpipe",
                 "gpu_minutes": round(result["gpu_minutes"], 1)},
        "reproduce": fields["reproduce"], "exported": fields["exported"],
    }
    stem.with_suffix(".json").write_text(json.dumps(card, indent=1) + "\n")
    t = card["test"]
    stem.with_suffix(".md").write_text(f"""# {stem.name}: a CIFAR-10 classifier as PyTorch would export it

Net: `{card['model']}`, ONNX opset {OPSET}: `plain_classifier()` ({card['parameters']:,}
parameters: 3x3 convs with BatchNorm (folded, as eval-mode export folds it), `Hardtanh(0, 1)`
(`Clip(0, 1)`), residual units, max pooling, global average pooling, `Linear`), trained in
Keras with 8-bit fake quantisation and written in PyTorch's export patterns
(`workbench.ir.to_onnx`).  It is the ONNX front end's reference classifier.
Recipe: `{json.dumps(card['recipe'])}`.
Epochs: {epochs_done} of {fields['epochs_planned']} ({'finished' if card['finished'] else 'INTERMEDIATE'}),
{card['training_minutes']} training minutes on {card['machine']}.
Data: {card['data']}.

Top-1 on the 10,000 CIFAR-10 test images (the last checkpoint; none was chosen on them):

| output | top-1 |
|---|---|
| Keras (8-bit activations, as trained) | {100 * t['top1_keras']:.2f} % |
| ONNX Runtime (CPU, float activations) | {100 * t['top1_onnxruntime']:.2f} % |
| GPU (ES 2.0 shaders from the .onnx file, Mesa llvmpipe) | {100 * t['top1_gpu']:.2f} % |

The GPU's top-1 equals ONNX Runtime's on {100 * t['gpu_top1_equals_onnxruntime']:.2f} % of the
images; largest logit difference {t['max_logit_diff_gpu_onnxruntime']:.3f}.

Reproduce: `{card['reproduce']}`
""")
    print(json.dumps(card, indent=1))


if __name__ == "__main__":
    if len(sys.argv) < 3 or sys.argv[1] not in ("train", "export"):
        sys.exit(__doc__)
    {"train": train, "export": export}[sys.argv[1]](*sys.argv[2:])
