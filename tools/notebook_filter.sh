#!/usr/bin/env bash
# Notebooks are stored without outputs: git strips a notebook as it reads it from the work tree
# (nbstripout as the `nbstripout` filter and `ipynb` diff driver that .gitattributes names), so
# running one in JupyterLab or papermill leaves the checkout clean.  Configures the git checkout
# run in (its .git/config), only at its top level: outside one it does nothing, quietly.
#   tools/notebook_filter.sh [PYTHON]   (PYTHON: one with nbstripout; default .venv/bin/python)
# Kept: cell ids (the stored notebooks' own).  Stripped beside outputs and counts (nbstripout's
# defaults, e.g. widget state): what papermill and a kernel add to the metadata.
set -euo pipefail

top="$(git rev-parse --show-toplevel 2>/dev/null)" || exit 0
[ "$top" -ef . ] || exit 0
python="${1:-.venv/bin/python}"
python="$(cd "$(dirname "$python")" && pwd)/$(basename "$python")"  # absolute, a venv's own
strip="\"$python\" -m nbstripout --keep-id"
info="metadata.language_info"
git config filter.nbstripout.clean "$strip"
git config filter.nbstripout.smudge cat
git config filter.nbstripout.required true
git config filter.nbstripout.extrakeys "metadata.papermill cell.metadata.papermill \
$info.codemirror_mode $info.file_extension $info.mimetype $info.nbconvert_exporter \
$info.pygments_lexer $info.version"
git config diff.ipynb.textconv "$strip -t"
