"""The project's actors: found by the app's autodiscovery of ``actors`` modules."""

from solid_objects import Actor, CommitContext, Rejected
from solid_objects.contrib.django import commit_action, table


class DjangoTally(Actor):
    total: int = 0

    def add(self, n: int) -> int:
        self.total += n
        return self.total


class DjangoOrders(Actor):
    """Places orders: the Order row is written by a commit action, with the turn."""

    placed: int = 0

    def place(self, sku: str) -> int:
        self.placed += 1
        self.commit_action("record_order", sku=sku)
        if not sku:
            raise Rejected("no_sku", "an order needs a sku")  # rolls back the staged row
        return self.placed

    def place_with_orm(self, sku: str) -> None:
        from .models import Order

        Order.objects.create(sku=sku)  # refused: it would commit apart from the turn


@commit_action("record_order")
def record_order(ctx: CommitContext, sku: str) -> None:
    from .models import Order

    ctx.connection.execute(table(Order).insert().values(sku=sku))
