-- A placeholder on the `roles` branch only: number 0011 belongs to the imports change, which
-- lands beside this one. At the merge this file is deleted and the imports' 0011 kept (the
-- migration runner wants the numbers without gaps).
SELECT 1;
