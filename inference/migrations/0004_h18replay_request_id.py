from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('inference', '0003_request_tool_and_route_reason'),
    ]

    operations = [
        migrations.AddField(
            model_name='requestlog',
            name='request_id',
            field=models.CharField(blank=True, db_index=True, help_text='Sent to the client as X-Request-Id.', max_length=32),
        ),
    ]
