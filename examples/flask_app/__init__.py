"""A small Flask app: one poll actor per question, one vote per person.

Run it: ``python -m examples.flask_app`` (Flask's development server on
http://127.0.0.1:5000, SQLite ``polls.db`` in the current folder;
``POLLS_DATABASE_URL=postgresql+psycopg://...`` names another database)::

    curl -X POST -H 'x-user: ann' 'http://127.0.0.1:5000/polls/lunch/votes?choice=soup'
    curl 'http://127.0.0.1:5000/polls/lunch'
"""

from __future__ import annotations

import os

from solid_objects.extras import requires_extra

with requires_extra("flask", "examples.flask_app"):
    from flask import Flask, request

from solid_objects import Actor, Rejected, query
from solid_objects.authorization import AuthorizationRequest
from solid_objects.contrib.flask import SolidObjects


class Poll(Actor):
    """One question; its votes are counted one at a time, so none is lost or doubled."""

    votes: dict[str, int] = {}
    voters: list[str] = []

    def vote(self, voter: str, choice: str) -> dict[str, int]:
        if voter in self.voters:
            raise Rejected("already_voted", f"{voter} has voted in this poll", {"voter": voter})
        self.voters.append(voter)
        self.votes[choice] = self.votes.get(choice, 0) + 1
        return self.votes

    @query
    def results(self) -> dict[str, int]:
        return self.votes


def signed_in(request: AuthorizationRequest) -> bool:
    """Voting needs a name (the ``X-User`` header stands in for a login)."""
    return request.context is not None


def anyone(request: AuthorizationRequest) -> bool:
    """Reading a poll's results needs nothing: said here, as refs built from a URL are
    denied every kind of call that has no policy."""
    return True


app = Flask(__name__)
app.config["SOLID_OBJECTS_DATABASE_URL"] = os.environ.get("POLLS_DATABASE_URL", "sqlite:///polls.db")
app.config["SOLID_OBJECTS_OPTIONS"] = {
    "workers": int(os.environ.get("POLLS_WORKERS", "2")),
    "authorize_message": signed_in,
    "authorize_query": anyone,
}
solid = SolidObjects(app, context=lambda request: request.headers.get("x-user"))


@app.post("/polls/<poll_id>/votes")
def vote(poll_id: str) -> dict[str, dict[str, int]]:
    voter = request.headers.get("x-user", "")
    return {"votes": solid.ref(Poll, poll_id).vote(voter=voter, choice=request.args["choice"])}


@app.get("/polls/<poll_id>")
def results(poll_id: str) -> dict[str, dict[str, int]]:
    return {"votes": solid.ref(Poll, poll_id).results()}
