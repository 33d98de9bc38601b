"""The table a user reads first: each layer group, its candidates and what runs now.

Built from the model's groups (`inspect`), the catalog's candidates, the board's running state
(`switching`) and the last time breakdown (`measure`). `table.Inventory` is the whole table,
`row.InventoryRow` one line of it.

May import: _backend, catalog, errors, inspect, measure, switching
"""
