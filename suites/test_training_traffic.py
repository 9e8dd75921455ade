"""The communication of a training step, per parallelism and model shape (see :mod:`pytest_gpucomm.ops.patterns`).

* data parallel (``test_dp_grad_sync``): the whole bf16 gradient all-reduced in PyTorch DDP's default buckets
  (1 MiB first, then 25 MiB), launched back to back; one full gradient sync per step;
* mixture of experts (``test_moe_all_to_all``): per MoE layer, the dispatch and combine all-to-all of the
  routed tokens, uneven splits drawn (seeded) from a skewed expert load; the imbalance is in the row's info;
* tensor parallel (``test_tp_layer``): per layer, 2 all-gathers and 2 reduce-scatters of the activation
  (seq x micro-batch x hidden, bf16) in tensor-parallel groups: pairs of neighbouring ranks on one host, the
  ranks of each node in a job launched on several nodes;
* pipeline parallel (``test_pp_send_recv``): one micro-batch's activation to the next stage and its gradient
  back, every stage at once;
* data and tensor parallel at once (``test_overlap_dp_tp``): the whole gradient sync on a communicator of its
  own while every layer's tensor-parallel collectives run on theirs (the backward pass); ``info["overlap"]``
  gives each one's time alone and overlapped, and the slowdowns.  The gated figure is the overlapped one.

Each row's ``info["step"]`` gives the communication time per training step of that shape and world
("the data-parallel gradient sync of the llama3-8b shape on 2 ranks: 41.3 ms per training step, ..."),
``info["step_comm_s"]`` the number, ``info["step_label"]`` the pattern and shape in words, and
``info["tail"]`` the figures of single iterations timed one by one (p50, p99, p99.9, max, jitter).  On CPU
(gloo) the element counts are divided by ``CPU_SCALE`` (``info["scale"]``); on GPU the shapes are full.

The shapes, from the models' Hugging Face config.json:

* ``llama3-8b``: hidden_size 4096, num_hidden_layers 32, 8.03e9 parameters; sequence 8192
  (https://huggingface.co/meta-llama/Meta-Llama-3-8B/blob/main/config.json);
* ``llama3-70b``: hidden_size 8192, num_hidden_layers 80, 70.6e9 parameters; sequence 8192
  (https://huggingface.co/meta-llama/Meta-Llama-3-70B/blob/main/config.json).  Its data-parallel gradient
  is that of one tensor-parallel rank of 8 (70.6e9 / 8 parameters, 17.7 GB): the whole 141 GB gradient does
  not fit one GPU, and 70B trains with tensor parallelism inside a node;
* ``deepseek-v2-moe``: hidden_size 5120, num_hidden_layers 60 of which 59 MoE (first_k_dense_replace 1),
  n_routed_experts 160, num_experts_per_tok 6; sequence 4096
  (https://huggingface.co/deepseek-ai/DeepSeek-V2/blob/main/config.json).

Micro-batch: 1 sequence; pipeline: 8 micro-batches per step.
"""

import pytest

DENSE = ["llama3-8b", "llama3-70b"]
MOE = ["deepseek-v2-moe"]


@pytest.mark.parametrize("model", DENSE)
def test_dp_grad_sync(model, process_group, comm):
    comm.dp_grad_sync(process_group, model)


@pytest.mark.parametrize("model", MOE)
def test_moe_all_to_all(model, process_group, comm):
    comm.moe_all_to_all(process_group, model)


@pytest.mark.parametrize("model", DENSE + MOE)
def test_tp_layer(model, process_group, comm):
    comm.tp_layer(process_group, model)


@pytest.mark.parametrize("model", DENSE + MOE)
def test_pp_send_recv(model, process_group, comm):
    comm.pp_send_recv(process_group, model)


@pytest.mark.parametrize("model", DENSE)
def test_overlap_dp_tp(model, process_group, comm):
    comm.overlap_dp_tp(process_group, model)
