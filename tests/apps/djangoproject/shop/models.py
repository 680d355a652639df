from django.db import models


class Order(models.Model):
    sku = models.CharField(max_length=40)
