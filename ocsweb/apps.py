from django.apps import AppConfig


class OcswebConfig(AppConfig):
    name = "ocsweb"
    verbose_name = "OCS Intelligence"
