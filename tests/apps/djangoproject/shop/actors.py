"""The project's actors: found by the app's autodiscovery of ``actors`` modules."""

from solid_objects import Actor


class DjangoTally(Actor):
    total: int = 0

    def add(self, n: int) -> int:
        self.total += n
        return self.total
