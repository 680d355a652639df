from django.urls import path
from shop import views

urlpatterns = [
    path("tallies/<str:tally_id>", views.total),
    path("tallies/<str:tally_id>/add", views.add),
    path("orders/<str:orders_id>", views.place),
]
