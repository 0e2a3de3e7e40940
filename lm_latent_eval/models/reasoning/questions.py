"""The answers to several questions as one latent LM, so that a run draws their chains side by side.

lm-eval's ``loglikelihood`` sends the answers of many questions; each question's view (``conditional_model``) is a
latent LM of its answers. ``QuestionsView`` holds the views of a batch's questions and is itself a latent LM whose
documents are the texts question ⊕ answer: every number it gives is the one the document's own view gives (the same
random stream, seeded from the document's text), and its proposal draws the chains of answers to different questions
in one lockstep batch (``proposal.sample_views``: each question's prompt, padded, in one forward pass).

Its token ids name the question: token v of the answer to question q is q · V + v (V: the network's vocabulary), so
that every part of the contract, which reads the answer's ids x only, finds the question's view from x.
"""

from __future__ import annotations

import torch

from ...protocol import CheckedProposal
from .proposal import sample_views


class QuestionsView:
    """Several questions' views as one latent LM (module docstring).

    Parameters
    ----------
    model : LatentReasoningLM
        The model whose views (``conditional_model``) answer the questions.
    pairs : list of (str, str)
        (question, answer): the documents are the texts question ⊕ answer, each the answer to one question.

    Raises
    ------
    ValueError
        Where one text is the answer to two questions (question ⊕ answer equal for two pairs).
    """

    # as every view: a prefix probability in the answer, a marginal listed chain by chain
    prefix_probability = True
    exact_marginal_tractable = False

    def __init__(self, model, pairs: list[tuple[str, str]]) -> None:
        self.views, self.route = [], {}
        where: dict[str, int] = {}
        for question, answer in pairs:
            if question not in where:
                where[question] = len(self.views)
                self.views.append(model.conditional_model(question))
            if self.route.setdefault(question + answer, where[question]) != where[question]:
                raise ValueError(f"{(question + answer)[-60:]!r} answers two questions: estimate them apart")
        self.stride = max(int(model.network.config.vocab_size), len(model.tokenizer))
        self.side_by_side_limit = model.side_by_side_limit
        self.proposal = QuestionsProposal(self)

    @property
    def device(self) -> torch.device:
        return self.views[0].device

    def view_of(self, x: torch.Tensor):
        """(the view of x's question, the answer's ids x mod V); an empty answer's view is the first (it names no
        question, and its log p = 0 under any)."""
        if x.numel() == 0:
            return self.views[0], x
        question = int(x[0]) // self.stride
        return self.views[question], x - question * self.stride

    def tokenize(self, text: str) -> torch.Tensor:
        """q · V + the answer's ids [T], q the question ``text`` answers."""
        if text not in self.route:
            raise ValueError(f"{text[-60:]!r} is none of the documents of this QuestionsView")
        question = self.route[text]
        return self.views[question].tokenize(text) + question * self.stride

    def random_stream_text(self, document: str) -> str:
        """The document's view's (``LatentReasoningLM.random_stream_text``)."""
        return self.views[self.route[document]].random_stream_text(document)

    def log_joint(self, x: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        view, ids = self.view_of(x)
        return view.log_joint(ids, z)

    def log_marginal(self, x: torch.Tensor) -> float:
        view, ids = self.view_of(x)
        return view.log_marginal(ids)

    def exact_marginal_cost(self, x: torch.Tensor) -> float:
        view, ids = self.view_of(x)
        return view.exact_marginal_cost(ids)

    def importance_weight_bound(self, temperature: float, peek: bool) -> float | None:
        return self.views[0].importance_weight_bound(temperature, peek)


class QuestionsProposal(CheckedProposal):
    """The proposal of a ``QuestionsView``: each answer's view's (``ChainProposal``), and answers to several questions
    side by side in one lockstep batch (``sample_documents``)."""

    def __init__(self, questions: QuestionsView) -> None:
        self.questions = questions

    def _sample(self, x, num_samples, temperature, peek, generator):
        view, ids = self.questions.view_of(x)
        return view.proposal._sample(ids, num_samples, temperature, peek, generator)

    def log_prob(self, x, z, temperature: float = 1.0, peek: bool = True) -> torch.Tensor:
        view, ids = self.questions.view_of(x)
        return view.proposal.log_prob(ids, z, temperature, peek)

    def _beam(self, x, beam_size):
        view, ids = self.questions.view_of(x)
        return view.proposal._beam(ids, beam_size)

    def sample_documents(self, xs, num_samples, temperature: float = 1.0, peek: bool = True, generators=None):
        """``sample_views`` of the answers, each with its question's view; the earlier batch every view holds is let
        go first (memory: a batch's cache)."""
        for view in self.questions.views:
            view._memo = None
        routed = [self.questions.view_of(x) for x in xs]
        views, ids = [view for view, _ in routed], [answer for _, answer in routed]
        return sample_views(views, ids, num_samples, temperature, peek, generators)


__all__ = ["QuestionsProposal", "QuestionsView"]
