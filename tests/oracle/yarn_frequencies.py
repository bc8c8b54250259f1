"""Writes tests/data/yarn_frequencies.json, the yarn frequencies tests/unit/test_yarn_rope.cpp
compares with: transformers' own _compute_yarn_parameters (4.46.3, the project venv) for five
LlamaConfigs whose max_position_embeddings is the original length (4.46 takes the band from
it), each frequency as a float hex literal, with the factor on cos and sin.

    .venv/bin/python tests/oracle/yarn_frequencies.py tests/data/yarn_frequencies.json
"""
import json
import sys

import transformers
from transformers.modeling_rope_utils import _compute_yarn_parameters

# (what, hidden_size, num_attention_heads, max_position_embeddings, rope_theta, yarn's keys)
CASES = [
    ("Qwen2.5-7B's shape with Qwen's setting", 3584, 28, 32768, 1e6, {"factor": 4.0}),
    ("beta_fast 16, beta_slow 2", 2048, 32, 8192, 5e5,
     {"factor": 8.0, "beta_fast": 16.0, "beta_slow": 2.0}),
    ("a band that closes (both ends at pair 0)", 64, 4, 6, 1e4, {"factor": 2.0}),
    ("a band clamped at dim - 1 (theta 500, original 1,000,000)", 64, 4, 1000000, 500.0,
     {"factor": 4.0}),
    ("beta_fast below beta_slow (a negative span)", 128, 4, 4096, 1e4,
     {"factor": 4.0, "beta_fast": 1.0, "beta_slow": 32.0}),
]

cases = []
for name, hidden, heads, positions, theta, scaling in CASES:
    shape = dict(hidden_size=hidden, num_attention_heads=heads,
                 max_position_embeddings=positions, rope_theta=theta)
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
