"""What this image's TensorFlow was built with, for `learnerkit image test`: one JSON line.

`cuda` and `cudnn` come from tf.sysconfig.get_build_info() when tf.test.is_built_with_cuda(); `gpus` counts
the GPUs TensorFlow sees.
"""

import json
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf  # noqa: E402

built_with_cuda = tf.test.is_built_with_cuda()
info = tf.sysconfig.get_build_info()
print(
    json.dumps(
        {
            "cuda": info.get("cuda_version") if built_with_cuda else None,
            "cudnn": info.get("cudnn_version") if built_with_cuda else None,
            "gpus": len(tf.config.list_physical_devices("GPU")),
            "detail": f"tensorflow {tf.__version__}",
        }
    )
)
