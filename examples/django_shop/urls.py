from django.urls import path

from . import views

urlpatterns = [
    path("carts/<str:cart_id>", views.contents),
    path("carts/<str:cart_id>/items", views.add_item),
    path("carts/<str:cart_id>/checkout", views.checkout),
]
