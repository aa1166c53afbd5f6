"""Conversions between units of temperature and of length."""


def celsius_to_fahrenheit(celsius):
    """Converts a temperature in degrees Celsius to degrees Fahrenheit.

    >>> celsius_to_fahrenheit(100)
    212.0
    """
    return celsius * 9 / 5 + 32


def fahrenheit_to_celsius(fahrenheit):
    """Converts a temperature in degrees Fahrenheit to degrees Celsius.

    >>> fahrenheit_to_celsius(50)
    10.0
    """
    return (fahrenheit - 32) * 5 / 9


def km_to_miles(km):
    """Converts a distance in kilometres to miles, rounded to three decimals.

    >>> km_to_miles(10)
    6.214
    """
    return round(km * 0.621371, 3)
