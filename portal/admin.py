"""Links from the Django admin to the teacher's pages (the teacher's pages link back)."""
from __future__ import annotations

from django.contrib import admin

# The admin's "View site" link: staff land on the teacher's pages, which have the live fleet
# view, imports and usage charts the admin lacks.
admin.site.site_url = "/teacher/"
