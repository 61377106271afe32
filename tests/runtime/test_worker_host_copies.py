"""``DeviceResult``: a step's results reach the host through the copies queued at launch.

On CUDA ``copy_to_host`` queues pinned copies right behind the step's sampling and records an
event; ``host_results`` must wait for that event and read the copies — never the device
tensors, whose synchronous copy would queue behind the steps launched since (the pipeline's
next graph). The CUDA calls themselves are checked on the GPU; here the plumbing.
"""

import torch

from deepinfer.runtime.worker import DeviceResult


class RecordingEvent:
    def __init__(self):
        self.waited = False

    def synchronize(self):
        self.waited = True


def test_host_results_wait_for_the_event_and_read_the_copies():
    device_tokens = torch.tensor([7, 8])
    parts = (torch.tensor([-0.5, -1.0]), torch.tensor([[7], [8]]), torch.tensor([[-0.5], [-1.0]]))
    event = RecordingEvent()
    copies = [torch.tensor([1, 2]), torch.tensor([-0.1, -0.2]), torch.tensor([[1], [2]]),
              torch.tensor([[-0.1], [-0.2]])]
    dev = DeviceResult(device_tokens, parts, host=copies, ready=event)
    tokens, logprobs = dev.host_results()
    assert event.waited
    assert tokens == [1, 2]  # the copies, not the device tensors
    assert [t.tolist() for t in logprobs] == [c.tolist() for c in copies[1:]]


def test_without_logprobs_the_copies_hold_only_tokens():
    dev = DeviceResult(torch.tensor([3]), None, host=[torch.tensor([4])], ready=RecordingEvent())
    assert dev.host_results() == ([4], None)


def test_on_the_cpu_nothing_is_copied():
    dev = DeviceResult(torch.tensor([5, 6]), None).copy_to_host()
    assert dev.ready is None and dev.host is None
    assert dev.host_results() == ([5, 6], None)
