"""``python -m onnxtrain``: the same command line as the ``onnxtrain`` console script."""

import sys

from onnxtrain._cli import main

sys.exit(main())
