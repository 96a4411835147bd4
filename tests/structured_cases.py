"""The JSON Schemas, GBNF grammars and tools the structured-output tests and
benchmarks/structured.py run (each with a prompt that asks for it)."""
from __future__ import annotations

ADDRESS = {"type": "object", "properties": {"street": {"type": "string", "maxLength": 40},
                                            "city": {"type": "string", "maxLength": 30},
                                            "zip": {"type": "string", "pattern": "^[0-9]{5}$"}},
           "required": ["street", "city", "zip"]}

# (prompt, schema): nested objects, arrays with minItems/maxItems, enums, required and optional
# fields, bounded integers and numbers, strings with pattern and format, anyOf, $ref/$defs.
SCHEMAS: list[tuple[str, dict]] = [
    ("Give a person's name and age.",
     {"type": "object", "properties": {"name": {"type": "string", "maxLength": 40}, "age": {"type": "integer", "minimum": 0, "maximum": 120}},
      "required": ["name", "age"]}),
    ("Give a city and its country.",
     {"type": "object", "properties": {"city": {"type": "string", "maxLength": 40}, "country": {"type": "string", "maxLength": 40}},
      "required": ["city", "country"]}),
    ("Name three fruits.",
     {"type": "object", "properties": {"fruits": {"type": "array", "items": {"type": "string", "maxLength": 20}, "minItems": 3, "maxItems": 3}},
      "required": ["fruits"]}),
    ("Pick a primary color.",
     {"type": "object", "properties": {"color": {"enum": ["red", "green", "blue"]}}, "required": ["color"]}),
    ("Rate the movie Titanic from 1 to 5 and say if you recommend it.",
     {"type": "object", "properties": {"stars": {"type": "integer", "minimum": 1, "maximum": 5}, "recommend": {"type": "boolean"}},
      "required": ["stars", "recommend"]}),
    ("Give the price of a coffee in dollars.",
     {"type": "object", "properties": {"item": {"type": "string", "maxLength": 30}, "price": {"type": "number", "exclusiveMinimum": 0, "maximum": 100}},
      "required": ["item", "price"]}),
    ("Give a US postal address.", {"type": "object", "properties": {"address": ADDRESS}, "required": ["address"]}),
    ("Describe a book with its author.",
     {"type": "object", "properties": {"title": {"type": "string", "maxLength": 60},
                                       "author": {"type": "object", "properties": {"first": {"type": "string", "maxLength": 20}, "last": {"type": "string", "maxLength": 20}},
                                                  "required": ["first", "last"]},
                                       "year": {"type": "integer", "minimum": 1400, "maximum": 2030}},
      "required": ["title", "author"]}),
    ("Give an email address for a support desk.",
     {"type": "object", "properties": {"email": {"type": "string", "format": "email"}}, "required": ["email"]}),
    ("Give today's date.",
     {"type": "object", "properties": {"date": {"type": "string", "format": "date"}}, "required": ["date"]}),
    ("Give a product code like AB-1234.",
     {"type": "object", "properties": {"code": {"type": "string", "pattern": "^[A-Z]{2}-[0-9]{4}$"}}, "required": ["code"]}),
    ("Either give a number or a word.",
     {"type": "object", "properties": {"value": {"anyOf": [{"type": "integer", "minimum": -1000, "maximum": 1000}, {"type": "string", "maxLength": 20}]}},
      "required": ["value"]}),
    ("Give two points on a plane.",
     {"type": "object", "$defs": {"point": {"type": "object", "properties": {"x": {"type": "number", "minimum": -100, "maximum": 100}, "y": {"type": "number", "minimum": -100, "maximum": 100}},
                                            "required": ["x", "y"]}},
      "properties": {"a": {"$ref": "#/$defs/point"}, "b": {"$ref": "#/$defs/point"}}, "required": ["a", "b"]}),
    ("List between one and four tags for a blog post about cooking.",
     {"type": "object", "properties": {"tags": {"type": "array", "items": {"type": "string", "pattern": "^[a-z]{1,12}$"}, "minItems": 1, "maxItems": 4}},
      "required": ["tags"]}),
    ("Give a user with an optional nickname.",
     {"type": "object", "properties": {"id": {"type": "integer", "minimum": 1, "maximum": 99999}, "nickname": {"type": "string", "maxLength": 20}},
      "required": ["id"]}),
    ("Give the temperature and its unit.",
     {"type": "object", "properties": {"value": {"type": "number", "minimum": -90, "maximum": 60}, "unit": {"enum": ["C", "F"]}},
      "required": ["value", "unit"]}),
    ("Describe a pet.",
     {"type": "object", "properties": {"pet": {"anyOf": [
         {"type": "object", "properties": {"kind": {"const": "dog"}, "breed": {"type": "string", "maxLength": 20}}, "required": ["kind", "breed"]},
         {"type": "object", "properties": {"kind": {"const": "cat"}, "indoor": {"type": "boolean"}}, "required": ["kind", "indoor"]}]}},
      "required": ["pet"]}),
    ("Give a 2x2 matrix of small integers.",
     {"type": "object", "properties": {"m": {"type": "array", "minItems": 2, "maxItems": 2,
                                             "items": {"type": "array", "minItems": 2, "maxItems": 2, "items": {"type": "integer", "minimum": -9, "maximum": 9}}}},
      "required": ["m"]}),
    ("Give an order with two line items.",
     {"type": "object", "$defs": {"line": {"type": "object", "properties": {"sku": {"type": "string", "pattern": "^[A-Z0-9]{3,8}$"}, "qty": {"type": "integer", "minimum": 1, "maximum": 10}},
                                           "required": ["sku", "qty"]}},
      "properties": {"order_id": {"type": "integer", "minimum": 1, "maximum": 1000000}, "lines": {"type": "array", "items": {"$ref": "#/$defs/line"}, "minItems": 2, "maxItems": 2}},
      "required": ["order_id", "lines"]}),
    ("Give a meeting time as a timestamp and its length in minutes.",
     {"type": "object", "properties": {"start": {"type": "string", "format": "date-time"}, "minutes": {"type": "integer", "enum": [15, 30, 60]}},
      "required": ["start", "minutes"]}),
]

# (prompt, GBNF grammar): each output is checked by a parser written in the test
GRAMMARS: dict[str, tuple[str, str]] = {
    "arith": ("Write an arithmetic expression: ",
              'root ::= expr\nexpr ::= term (("+" | "-") term){0,3}\nterm ::= factor (("*" | "/") factor){0,2}\n'
              'factor ::= [0-9]{1,3} | "(" [0-9]{1,3} (("+" | "-") [0-9]{1,3}){1,2} ")"\n'),
    "date": ("Log line for a meeting: ",
             'root ::= "DATE " year "-" month "-" day " " [A-Za-z ]{1,30} "."\nyear ::= "20" [0-9] [0-9]\n'
             'month ::= "0" [1-9] | "1" [0-2]\nday ::= "0" [1-9] | [12] [0-9] | "3" [01]\n'),
    "list": ("A shopping list:\n",
             'root ::= item{1,5}\nitem ::= "- " [a-z]+ (" " [a-z]+)? "\\n"\n'),
}

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 40},
                                                    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
                   "required": ["city", "unit"]}}}
TIME = {"type": "function", "function": {
    "name": "get_time", "description": "Current local time in a time zone",
    "parameters": {"type": "object", "properties": {"timezone": {"type": "string", "maxLength": 40}}, "required": ["timezone"]}}}

# A Hermes 2 Pro / Qwen 2.5 style template (tools rendered by the template, calls in
# <tool_call> blocks), in ChatML so SmolLM2 can run it.
HERMES_TEMPLATE = """{%- if tools %}<|im_start|>system
{% if messages[0]['role'] == 'system' %}{{ messages[0]['content'] }}{% else %}You are a helpful assistant.{% endif %}

# Tools

You are provided with function signatures within <tools></tools> XML tags:
<tools>
{% for tool in tools %}{{ tool | tojson }}
{% endfor %}</tools>

For each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:
<tool_call>
{"name": <function-name>, "arguments": <args-json-object>}
</tool_call><|im_end|>
{% elif messages[0]['role'] == 'system' %}<|im_start|>system
{{ messages[0]['content'] }}<|im_end|>
{% endif %}
{%- for message in messages %}
{%- if message.role == 'user' or (message.role == 'system' and not loop.first) or (message.role == 'assistant' and not message.tool_calls) %}<|im_start|>{{ message.role }}
{{ message.content }}<|im_end|>
{% elif message.role == 'assistant' %}<|im_start|>assistant
{% for tc in message.tool_calls %}<tool_call>
{"name": "{{ tc.function.name }}", "arguments": {{ tc.function.arguments | tojson }}}
</tool_call>{% endfor %}<|im_end|>
{% elif message.role == 'tool' %}<|im_start|>user
<tool_response>
{{ message.content }}
</tool_response><|im_end|>
{% endif %}
{%- endfor %}
{%- if add_generation_prompt %}<|im_start|>assistant
{% endif %}"""
