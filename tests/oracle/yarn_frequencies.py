"""Writes tests/data/yarn_frequencies.json, the yarn frequencies tests/unit/test_yarn_rope.cpp
compares with: transformers' own _compute_yarn_parameters (4.46.3, the project venv) for three
LlamaConfigs whose max_position_embeddings is the original length (4.46 takes the band from
it), each frequency as a float hex literal, with the factor on cos and sin.

    .venv/bin/python tests/oracle/yarn_frequencies.py tests/data/yarn_frequencies.json
"""
import json
import sys

import transformers
from transformers.modeling_rope_utils import _compute_yarn_parameters

CASES = [
    ("Qwen2.5-7B's shape with Qwen's setting",
     dict(hidden_size=3584, num_attention_heads=28, max_position_embeddings=32768,
          rope_theta=1000000.0), {"factor": 4.0}),
    ("beta_fast 16, beta_slow 2",
     dict(hidden_size=2048, num_attention_heads=32, max_position_embeddings=8192,
          rope_theta=500000.0), {"factor": 8.0, "beta_fast": 16.0, "beta_slow": 2.0}),
    ("a band that closes (both ends at pair 0)",
     dict(hidden_size=64, num_attention_heads=4, max_position_embeddings=6,
          rope_theta=10000.0), {"factor": 2.0}),
]

cases = []
for name, shape, scaling in CASES:
    config = transformers.LlamaConfig(**shape, rope_scaling={"rope_type": "yarn", **scaling})
    inv_freq, attention_factor = _compute_yarn_parameters(config, "cpu")
    cases.append({
        "what": name,
        "head_dim": shape["hidden_size"] // shape["num_attention_heads"],
        "rope_theta": shape["rope_theta"],
        "factor": scaling["factor"],
        "original_max_position_embeddings": shape["max_position_embeddings"],
        "beta_fast": scaling.get("beta_fast", 32.0),
        "beta_slow": scaling.get("beta_slow", 1.0),
        "attention_factor": attention_factor,
        "inv_freq": [float(f).hex() for f in inv_freq.tolist()],
    })
with open(sys.argv[1], "w") as f:
    json.dump({"source": f"transformers {transformers.__version__} _compute_yarn_parameters "
                         "(tests/oracle/yarn_frequencies.py)", "cases": cases}, f, indent=1)
    f.write("\n")
