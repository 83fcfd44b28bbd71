"""Train the reference CIFAR-10 classifier checkpoint, or export one from a (partial) run.

  python tools/cifar10_reference.py train RUN_DIR [EPOCHS]     (resumable; default 60 epochs)
  python tools/cifar10_reference.py export RUN_DIR [OUT_STEM]  (default models/cifar10_reference)

The recipe is the classifier notebook's (preset cifar10, quantisation-aware, augmentation,
Adam 3e-3 with cosine decay, batch 64) on the 20,000 training images of the data folder
(2,000 a class); validation during training on 100 test images a class.  Export scores the
last checkpoint (the cosine schedule's end; no checkpoint is chosen on the test set) on all
10,000 test images with TensorFlow and through the ES 2.0 shaders (16-bit fixed-point dense
layer) on this machine's GL, and writes ``OUT_STEM.keras``, ``.json`` and ``.md`` (the card).
"""
import json
import platform
import sys
import time
from pathlib import Path

import workbench  # noqa: F401  (TF settings first)
from workbench import es2
from workbench.data import datasets
from workbench.nets import classify, training
from workbench.nets.models import load_model
from workbench.run.report import machine
from workbench.studies import deploy

RECIPE = classify.ClassifierRecipe(preset="cifar10", quantize=True, augment=True,
                                   optimizer="adam", learning_rate=3e-3, schedule="cosine",
                                   batch=64, val_limit=100, seed=0)


def train(run_dir, epochs=60, recipe=RECIPE):
    classify.train(run_dir, recipe.replace(data=datasets.classification_root("cifar10"),
                                           epochs=int(epochs)))


def scored(run_dir, tool, reference=None):
    """A training run scored on all 10,000 test images: ``(keras model, compare_classifier's
    result, the card's fields every classifier card has)``.  ``reference``: a function of the
    Keras checkpoint giving the model the GPU net is compiled from and compared with (default
    the checkpoint itself); ``tool``: the script that reproduces it."""
    run_dir = Path(run_dir)
    recipe = classify.ClassifierRecipe.of_run(run_dir)
    history = json.loads((run_dir / training.HISTORY).read_text())
    model = load_model(run_dir / training.CHECKPOINT)
    root = datasets.classification_root("cifar10")
    images, labels, _ = datasets.classification_arrays(root, "test", recipe.input_size,
                                                       classes=list(recipe.classes))
    reference = reference(model) if reference else model
    net = es2.compile(reference)
    start = time.time()
    result = deploy.compare_classifier(reference, net, list(images), labels, emulate=False)
    result["gpu_minutes"] = (time.time() - start) / 60
    result["keras_top1"] = float((model.predict(images, batch_size=256, verbose=0).argmax(1)
                                  == labels).mean())
    epochs_done = len(history["loss"])
    fields = {
        "epochs_done": epochs_done, "epochs_planned": recipe.epochs,
        "finished": epochs_done >= recipe.epochs,
        "training_minutes": round(history.get("seconds", 0) / 60, 1),
        "data": f"CIFAR-10: {len(recipe.classes)} classes, the first 2,000 training images "
                "a class of cls/cifar10/train (WORKBENCH_DATA); scored on all 10,000 test images",
        "machine": f"{machine()} (shared with other work), TF CPU, Python "
                   f"{platform.python_version()}",
        "reproduce": f"WORKBENCH_DATA=... PYTHONPATH=. python tools/{tool} train {run_dir} "
                     f"{recipe.epochs}; python tools/{tool} export {run_dir}",
        "exported": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        # the run's recipe; its data is the card's "data" (a path of the training machine)
        "recipe": {"function": "workbench.nets.classify.train",
                   **{k: v for k, v in recipe.to_dict().items() if k != "data"}},
    }
    return model, result, fields


def export(run_dir, stem="models/cifar10_reference"):
    stem = Path(stem)
    model, result, fields = scored(run_dir, "cifar10_reference.py")
    epochs_done, gpu_minutes = fields["epochs_done"], result["gpu_minutes"]
    stem.parent.mkdir(parents=True, exist_ok=True)
    training.save_model(model, stem.with_suffix(".keras"))
    card = {
        "model": stem.with_suffix(".keras").name, "net": "dogs-net units, preset cifar10",
        "parameters": model.count_params(),
        **{k: fields[k] for k in ("recipe", "epochs_done", "finished", "training_minutes",
                                  "data", "machine")},
        "test": {"images": result["images"], "top1_tf": result["top1_TF"],
                 "top1_gpu": result["top1_GPU"], "gpu_top1_equals_tf": result["gpu_top1_equals_tf"],
                 "max_logit_diff_gpu_tf": result["max_logit_diff_gpu_tf"],
                 "gpu": "ES 2.0 shaders, 16-bit fixed-point dense layer, Mesa llvmpipe",
                 "gpu_minutes": round(gpu_minutes, 1)},
        "reproduce": fields["reproduce"], "exported": fields["exported"],
    }
    stem.with_suffix(".json").write_text(json.dumps(card, indent=1) + "\n")
    t = card["test"]
    stem.with_suffix(".md").write_text(f"""# {stem.name}: CIFAR-10 reference classifier

Net: `{card['model']}`, the dogs-net units at CIFAR-10 size (`dogs_classifier("cifar10")`,
{card['parameters']:,} parameters; sigmoid-like activation, BatchNorm folded at deployment).
Recipe: `{json.dumps(card['recipe'])}`.
Epochs: {epochs_done} of {fields['epochs_planned']} ({'finished' if card['finished'] else 'INTERMEDIATE'}),
{card['training_minutes']} training minutes on {card['machine']}.
Data: {card['data']}.

Top-1 on the 10,000 CIFAR-10 test images (the last checkpoint; none was chosen on them):

| output | top-1 |
|---|---|
| TensorFlow (8-bit activations, as trained) | {100 * t['top1_tf']:.2f} % |
| GPU (ES 2.0 shaders on Mesa llvmpipe, 16-bit fixed-point dense layer) | {100 * t['top1_gpu']:.2f} % |

The GPU's top-1 equals TensorFlow's on {100 * t['gpu_top1_equals_tf']:.2f} % of the images;
largest logit difference {t['max_logit_diff_gpu_tf']:.3f}.

Reproduce: `{card['reproduce']}`
""")
    print(json.dumps(card, indent=1))


if __name__ == "__main__":
    {"train": train, "export": export}[sys.argv[1]](*sys.argv[2:])
